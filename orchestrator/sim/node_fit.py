"""What a simulated node refuses before anything starts, read from its profile: more GPUs than it has,
weights that alone fill every GPU at the spec's count, and an EAGLE-3 draft under EAGLE.

A real node's spec gets these checks from the models' config.json (`driver.console.cli_checks`); the
simulated node has no config.json to read, so without this a demo spec with `node.gpus: 16` launched and
failed on "invalid device ordinal", one with `node.gpus: 3` started Ray to predict every trial out of
memory, and an EAGLE-3 draft under EAGLE launched to an acceptance length of 1.01.
"""

from __future__ import annotations

from orchestrator.sim.memory import torch_total_gib
from orchestrator.sim.profile import SimProfile

EAGLE3_SUFFIX = "Eagle3"  # SGLang's EAGLE-3 draft classes: LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM


def weights_gib(profile: SimProfile, gpus: int) -> float:
    """Target and draft weights on one GPU at tp ``gpus`` (as the simulated server loads them)."""
    draft = profile.draft_weights_gib / (gpus if profile.draft_weights_sharded else 1)
    return profile.target_weights_gib / gpus + draft


def free_before_loading_gib(profile: SimProfile) -> float:
    """What one GPU has for the weights: torch's capacity less the CUDA context and NCCL's buffers."""
    return torch_total_gib(profile) - profile.cuda_context_gib - profile.dist_init_gib


def spec_refusal(profile: SimProfile, gpus: int, algorithm: str) -> str | None:
    """Why a spec cannot run on ``profile``'s node, as an error naming the field and the fix; None if
    it can."""
    if gpus > profile.gpu_count:
        return (
            f"node.gpus: {gpus}: the simulated node '{profile.name}' has {profile.gpu_count} "
            f"GPU{'s' if profile.gpu_count > 1 else ''} "
            f"(simulated.profile); set node.gpus to at most {profile.gpu_count}, or name a profile of a "
            "larger node"
        )
    if profile.gpu_count % gpus:
        # A tp that does not split the node evenly divides no model's heads that the node's count does.
        counts = [n for n in range(1, profile.gpu_count + 1) if profile.gpu_count % n == 0]
        listed = ", ".join(map(str, counts[:-1])) + f" or {counts[-1]}" if len(counts) > 1 else str(counts[0])
        return (
            f"node.gpus: {gpus}: a trial runs at --tp-size {gpus}, which does not split the simulated node "
            f"'{profile.name}' ({profile.gpu_count} GPUs) evenly; set node.gpus to {listed}"
        )
    free = free_before_loading_gib(profile)
    if weights_gib(profile, gpus) > free:
        # Counts that split the node evenly (a tp of 6 on 8 GPUs divides no model's heads that 8 does, and
        # weights that only just fit leave nothing for the KV pool and graphs anyway).
        counts = [n for n in range(gpus + 1, profile.gpu_count + 1) if profile.gpu_count % n == 0]
        holds = [n for n in counts if weights_gib(profile, n) <= free]
        where = (
            f"the smallest count that holds them is {holds[0]} ({weights_gib(profile, holds[0]):.2f} GiB "
            f"per GPU): run on nodes of {holds[0]} GPUs (node.gpus: {holds[0]})"
            if holds
            else f"not even all {profile.gpu_count} GPUs of this node hold them"
        )
        return (
            f"node.gpus: {gpus}: the weights alone ({weights_gib(profile, gpus):.2f} GiB per GPU at "
            f"--tp-size {gpus}, target + draft) exceed what one GPU of the simulated node "
            f"'{profile.name}' has free before loading ({free:.2f} GiB): no fraction fits; {where}"
        )
    if profile.draft_arch.endswith(EAGLE3_SUFFIX) and algorithm != "EAGLE3":
        return (
            f"model.speculative_algorithm: {algorithm}, but the simulated node's draft is an EAGLE-3 "
            f"draft ({profile.draft_arch}, simulated.profile '{profile.name}'): SGLang would serve it with "
            "an acceptance length of about 1.0 and no warning. Set speculative_algorithm: EAGLE3."
        )
    return None

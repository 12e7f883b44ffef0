"""What SGLang refuses to build, read from the models' config.json before anything launches.

- The tp size must divide the attention heads: every model's attention layer asserts
  ``self.total_num_heads % tp_size == 0`` when it is built (``python/sglang/srt/models/llama.py``,
  ``LlamaAttention.__init__``; Qwen2, Mistral and the rest copy it; DeepSeek's MLA asserts the same of its
  heads). The KV heads are split while there are at least as many as GPUs (``total_num_kv_heads %
  tp_size == 0``) and replicated below that (``tp_size % total_num_kv_heads == 0``), each GPU then holding
  one (``max(1, total_num_kv_heads // tp_size)``); MLA has one latent KV, whole on every GPU. A tp that
  breaks either rule is a bare ``AssertionError`` in the scheduler's traceback, after the processes have
  started and claimed their GPUs.
- An EAGLE-3 draft runs on the target's hidden states and shares its embeddings: its first layer reads
  ``target_hidden_size`` (3 layers' hidden states through ``fc``) and the target's embedding rows, which
  are ``hidden_size`` wide, so a draft trained for another target (another hidden size or another
  vocabulary) cannot load against this one.
- A model folder is parsed as Mistral's native format (``params.json``, not config.json) when its path,
  lowercased, holds ``mistral-large-3``, ``mistral-small-4`` or ``leanstral``, or both ``eagle`` and
  ``mistral`` (``is_mistral_model`` in ``python/sglang/srt/utils/hf_transformers/mistral_utils.py``,
  0.5.17: Mistral's EAGLE drafts ship in that format only). A Hugging Face-format folder under such a name
  fails every launch with ``FileNotFoundError: File not found ..., params.json``.

A shared leaf: it reads `ModelShape` (`footprint.shape`) and nothing above it, so the spec's checks, the
memory command and the prior state the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.footprint.shape import ModelShape

MAX_TP = 64  # the largest tp advised: 8 nodes of 8 GPUs


def _model_name(shape: ModelShape) -> str:
    return str(shape.path)


def tp_problem(shape: ModelShape, tp: int) -> str | None:
    """Why SGLang cannot build ``shape`` at ``tp`` (None when it can): the heads it must split, named
    with the config.json field."""
    if shape.heads % tp:
        return (
            f"{shape.heads} attention heads (num_attention_heads in {_model_name(shape)}) do not split "
            f"evenly over {tp} GPUs (SGLang asserts num_attention_heads % tp_size == 0)"
        )
    if shape.mla:
        return None  # one latent KV per layer, whole on every GPU: no KV heads to split
    kv = shape.kv_heads
    if kv >= tp and kv % tp:
        return (
            f"{kv} KV heads (num_key_value_heads in {_model_name(shape)}) do not split evenly over {tp} "
            f"GPUs (SGLang asserts num_key_value_heads % tp_size == 0 when there are at least as many "
            "KV heads as GPUs)"
        )
    if kv < tp and tp % kv:
        return (
            f"{kv} KV heads (num_key_value_heads in {_model_name(shape)}) cannot be replicated over {tp} "
            f"GPUs (with fewer KV heads than GPUs SGLang gives each GPU one head, and asserts tp_size % "
            "num_key_value_heads == 0)"
        )
    return None


def valid_tps(shapes: Sequence[ModelShape], up_to: int = MAX_TP) -> list[int]:
    """Every tp size up to ``up_to`` at which SGLang can build all of ``shapes`` (target and draft)."""
    return [tp for tp in range(1, up_to + 1) if all(tp_problem(s, tp) is None for s in shapes)]


def tp_refusal(shapes: Sequence[ModelShape], tp: int) -> str | None:
    """The first model's reason SGLang refuses ``tp``, with the tp sizes it accepts (None: accepted)."""
    for shape in shapes:
        why = tp_problem(shape, tp)
        if why:
            ok = valid_tps(shapes)
            return f"{why}; SGLang accepts tp {', '.join(str(t) for t in ok)}"
    return None


def draft_mismatch(target: ModelShape, draft: ModelShape) -> str | None:
    """Why ``draft`` cannot be this target's EAGLE-3 draft (None when its shapes match): every figure
    that differs, both sides named with the file each comes from."""
    if not draft.eagle3:
        return None  # an EAGLE(-1) draft or another kind: its own rules, not checked here
    d, t = _model_name(draft), _model_name(target)
    problems = []
    if draft.target_hidden != target.hidden:
        field = "target_hidden_size" if draft.target_hidden != draft.hidden else "hidden_size"
        problems.append(
            f"the draft reads hidden states {draft.target_hidden} wide ({field} in {d}) and the target's "
            f"are {target.hidden} (hidden_size in {t})"
        )
    elif draft.hidden != target.hidden:
        problems.append(
            f"the draft's layer is {draft.hidden} wide (hidden_size in {d}) and it takes the target's "
            f"{target.hidden}-wide embeddings (hidden_size in {t})"
        )
    if draft.vocab != target.vocab:
        problems.append(
            f"the draft's vocabulary has {draft.vocab} tokens (vocab_size in {d}) and the target's "
            f"{target.vocab} (vocab_size in {t})"
        )
    if not problems:
        return None
    return (
        "; ".join(problems)
        + ": the draft was trained for another model; use the EAGLE-3 draft made for this target"
    )


def _read_as_mistral_native(path: str) -> bool:
    """SGLang's name heuristic for Mistral's native format (see the module's docstring)."""
    lower = path.lower()
    named = any(n in lower for n in ("mistral-large-3", "mistral-small-4", "leanstral"))
    return named or ("eagle" in lower and "mistral" in lower)


def format_by_name_problem(path: str, has_config: bool, has_params: bool) -> str | None:
    """Why SGLang cannot read the model folder at ``path`` (None when it can): a Hugging Face-format
    folder (config.json, no params.json) under a name SGLang reads as Mistral's native format."""
    if not _read_as_mistral_native(path) or has_params or not has_config:
        return None
    return (
        "SGLang reads a path holding both 'eagle' and 'mistral' (or a Mistral Large 3 / Small 4 name) as "
        "Mistral's native format and looks for params.json, which this folder lacks (it has config.json): "
        "every launch would fail with FileNotFoundError; give it a path without one of those words "
        "(rename the folder, or link it under another name), or add the draft's params.json"
    )

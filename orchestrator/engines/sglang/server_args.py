"""SGLang's own view of a launch, read off its log: the `server_args=` line and the lines that override it.

It satisfies `engines.logrecords.ResolvedArgs`, so a trial reads it as any engine's resolved arguments;
SGLang's own readers (its tests, the memory prior's fixtures) see every field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.records import ResolvedLaunch


@dataclass(frozen=True)
class SglangServerArgs:
    """SGLang's own view of the launch: its `server_args=` line plus the lines that override it later;
    `launch_values` maps it to the engine-neutral `records.ResolvedLaunch` a trial's record carries."""

    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    tp_size: int | None = None
    max_running_requests_reset_to: int | None = None  # "Max running requests is reset to 48 ..."
    effective_max_running_requests: int | None = None  # from the max_total_num_tokens=... line
    raw: dict[str, str] = field(default_factory=dict)  # every top-level key of the line, value as printed
    cuda_graph_bs: tuple[int, ...] = ()
    disable_cuda_graph: bool | None = None
    context_len: int | None = None  # from the max_total_num_tokens=... line

    def launch_values(self) -> ResolvedLaunch:
        """What SGLang settled on for the launch values the sweep sets (those printed), for the record."""
        return ResolvedLaunch(
            mem_fraction_static=self.mem_fraction_static,
            cuda_graph_max_bs=self.cuda_graph_max_bs,
            max_running_requests=self.max_running_requests,
            effective_max_running_requests=self.effective_max_running_requests,
            max_running_requests_reset_to=self.max_running_requests_reset_to,
            speculative_num_steps=self.speculative_num_steps,
            speculative_eagle_topk=self.speculative_eagle_topk,
            speculative_num_draft_tokens=self.speculative_num_draft_tokens,
        )

    def as_params(self) -> dict[str, float | int | str | bool]:
        """The typed values that are set (``raw`` and the batch-size list left out), for MLflow."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if v is not None and isinstance(v, float | int | str | bool) and k != "raw"
        }

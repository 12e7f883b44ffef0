"""A memory model learned online from the trials' own logs, to skip what cannot fit.

Per GPU, three quantities decide a start-up:

- the KV pool in tokens, linear in `mem_fraction_static` (SGLang sizes it as
  `avail_after_weights - avail_at_start * (1 - f)` over a fixed cell size): at or below zero the
  start fails at KV allocation;
- the memory left for CUDA graphs once weights and KV are placed, also linear in the fraction;
- the CUDA-graph memory, linear in the captured width (`cuda_graph_max_bs`, times the tokens per request
  that a speculative verify graph holds).

Each is fitted by least squares on the trials seen so far, starting from SGLang's own formulas once the
first trial has printed its weights. Every figure is per GPU, at the model's tensor-parallel size: a
trial measured at another tp (an earlier study on other nodes) is converted first, since the weights
and the KV bytes per token both split across the tp ranks (`at_tp`). A graph-stage OOM is a lower
bound on the graph memory at its width, so a predicted-feasible trial that OOMs corrects the model.
The coefficients are plain data so a later study can start from an earlier one's.

Memory figures are GiB (2^30 bytes), which SGLang's log prints as "GB" (the `_gb` names keep the log's
word); the reasons and corrections written for users say GiB, as the memory command does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from orchestrator.config.adaptive import candidate_steps, tiers_of
from orchestrator.footprint.shape import ShapeError, kv_shards, read_config
from orchestrator.records import (
    FailureStage,
    MemoryAccount,
    ServerConfig,
    TrialResult,
    TrialStatus,
    fraction_text,
)

log = logging.getLogger(__name__)

GRAPH_SAFETY_GB = 0.25  # activations and fragmentation on top of what the capture lines report
DISAGREEMENT = 0.15  # a measured figure this far from the prediction corrects the model (recorded)


def graph_width(config: ServerConfig) -> float:
    """What the CUDA-graph memory grows with: captured batch sizes x tokens per request. An adaptive
    launch captures graphs for every tier, so each other tier adds its own tokens per request."""
    bs = min(config.cuda_graph_max_bs, config.max_running_requests)
    per_req = config.speculative_num_draft_tokens or 1
    tiers = tiers_of(config)
    if tiers is not None:
        per_req += sum(s + 1 for s in candidate_steps(tiers) if s != config.speculative_num_steps)
    return float(bs * per_req)


def kv_heads_of(model_path: str) -> int | None:
    """The target's KV heads from its config.json, where the driver can read it (else None)."""
    try:
        config = read_config(model_path)
    except ShapeError:
        return None
    heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
    return int(heads) if isinstance(heads, int) and heads > 0 else None


@dataclass(frozen=True)
class TpFigures:
    """One trial's per-GPU start-up figures, as printed at the tp it ran with."""

    avail_at_start_gb: float
    weights_gb: float  # target + draft
    kv_gb: float  # target + draft pools
    kv_tokens: float

    def at_tp(self, tp_from: int, tp_to: int, kv_heads: int | None = None) -> TpFigures:
        """The same configuration at `tp_to`: weights and KV bytes per token split by tp. The KV pool
        is what the static budget leaves after the weights, so it grows by what the weights give back."""
        weights = self.weights_gb * tp_from / tp_to
        per_token = self.kv_gb / self.kv_tokens * kv_shards(tp_from, kv_heads) / kv_shards(tp_to, kv_heads)
        kv_gb = self.kv_gb + self.weights_gb - weights
        return TpFigures(self.avail_at_start_gb, weights, kv_gb, kv_gb / per_token)


@dataclass
class Line:
    """y = a + b x, fitted on points; with one point the slope comes from the prior."""

    prior_slope: float
    points: list[tuple[float, float]] = field(default_factory=list)

    def add(self, x: float, y: float) -> None:
        self.points.append((x, y))

    @property
    def known(self) -> bool:
        return bool(self.points)

    def coef(self) -> tuple[float, float]:
        xs = [p[0] for p in self.points]
        ys = [p[1] for p in self.points]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if n >= 2 and sxx > 1e-9:
            b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        else:
            b = self.prior_slope
        return my - b * mx, b

    def __call__(self, x: float) -> float:
        a, b = self.coef()
        return a + b * x

    def solve(self, y: float) -> float | None:
        a, b = self.coef()
        return (y - a) / b if abs(b) > 1e-12 else None


def started(result: TrialResult) -> bool:
    """Whether the trial's start-up completed (all its graphs captured), so its memory account is whole:
    it served, or failed only under load (out of memory, retractions, latency, a crash while serving)."""
    if result.status is TrialStatus.OK:
        return True
    return result.failure is not None and result.failure.stage is FailureStage.UNDER_LOAD


@dataclass(frozen=True)
class Prediction:
    fits: bool
    confident: bool
    stage: FailureStage | None  # where it would fail
    kv_tokens: float | None
    graph_room_gb: float | None
    graph_need_gb: float | None
    reason: str
    # The analytic prior refused it (driver.memory.prior_model), not a bound learned from launches: a
    # value, so that no caller reads it from the reason's words.
    from_prior: bool = False

    @property
    def skip(self) -> bool:
        return self.confident and not self.fits

    def figures(self) -> dict[str, float]:
        """The predicted figures that are known, under the names the records use."""
        named = {
            "kv_tokens": self.kv_tokens,
            "graph_room_gb": self.graph_room_gb,
            "graph_need_gb": self.graph_need_gb,
        }
        return {k: float(v) for k, v in named.items() if v is not None}


@dataclass(frozen=True)
class Correction:
    trial: int
    what: str


class MemoryModel:
    def __init__(self, tp: int = 1, kv_heads: int | None = None) -> None:
        self.tp = tp  # the tensor-parallel size every figure here is per GPU at
        self.kv_heads = kv_heads  # the target's KV heads, when known: beyond them tp replicates KV
        self.avail_at_start_gb: float | None = None
        self.weights_gb: float | None = None
        self.draft_weights_gb: float | None = None
        self.kv_tokens = Line(prior_slope=0.0)  # tokens vs fraction; slope set once weights are known
        self.graph_room = Line(prior_slope=0.0)  # GB left for graphs vs fraction
        self.graph_need = Line(prior_slope=0.0)  # GB of graphs vs graph_width
        self.graph_floor: list[tuple[float, float]] = []  # (width, GB that were not enough) from OOMs
        self.kv_floor: float = 0.0  # the highest fraction seen to leave no KV pool
        self.corrections: list[Correction] = []

    # -- learning ------------------------------------------------------------------------------------

    def observe(self, number: int, result: TrialResult, tp: int | None = None) -> list[Correction]:
        """Learn from a finished trial run at `tp` (default: the model's); return the corrections it
        forced (also kept)."""
        m, c = self._per_gpu(result.memory, tp or self.tp), result.config
        before = self.predict(c) if self.ready else None
        if m.get("avail_at_start_gb") and m.get("weights_gb") is not None:
            self.avail_at_start_gb = m["avail_at_start_gb"]
            self.weights_gb = m["weights_gb"]
            self.draft_weights_gb = m.get("draft_weights_gb", self.draft_weights_gb or 0.0)
        resolved = result.resolved_args.mem_fraction_static
        f = resolved if resolved is not None else c.mem_fraction_static
        kv_tokens = m.get("kv_cache_tokens")
        kv_gb = m.get("kv_cache_gb")
        if kv_tokens and kv_gb and self.avail_at_start_gb:
            # d(tokens)/d(f) = avail_at_start / bytes per token (SGLang's sizing rule).
            per_token_gb = (kv_gb + m.get("draft_kv_cache_gb", 0.0)) / kv_tokens
            self.kv_tokens.prior_slope = self.avail_at_start_gb / per_token_gb
            self.kv_tokens.add(f, kv_tokens)
        room = m.get("avail_after_kv_gb")
        if room is not None:
            if self.avail_at_start_gb:
                self.graph_room.prior_slope = -self.avail_at_start_gb
            self.graph_room.add(f, room)
        width = graph_width(c)
        need = (m.get("graph_gb") or 0.0) + (m.get("draft_graph_gb") or 0.0)
        graph_oom = (
            result.status is TrialStatus.OOM
            and result.failure is not None
            and result.failure.stage
            in (
                FailureStage.TARGET_GRAPH_CAPTURE,
                FailureStage.DRAFT_GRAPH_CAPTURE,
            )
        )
        if (
            result.status is TrialStatus.OOM
            and result.failure is not None
            and result.failure.stage is FailureStage.KV_ALLOCATION
            and not kv_tokens
        ):
            # The target's pool itself did not fit: every lower fraction fails the same way. (A draft
            # pool that does not fit after the target's, as in SGLang <= 0.5.9, fails at *high*
            # fractions instead, so it sets no floor.)
            self.kv_floor = max(self.kv_floor, f)
        if started(result) and need > 0:
            self.graph_need.add(width, need)
        if graph_oom and room is not None:
            self.graph_floor.append((width, room))
        return self._check(number, result, before, room, kv_tokens, graph_oom)

    def _per_gpu(self, account: MemoryAccount, tp: int) -> dict[str, float]:
        """A trial's memory figures converted to this model's tp (unchanged at the same tp); plain
        numbers, since a pool converted to another tp is an estimate, not a whole count of tokens."""
        memory = account.as_metrics()
        tokens, kv = memory.get("kv_cache_tokens"), memory.get("kv_cache_gb")
        if tp == self.tp or memory.get("weights_gb") is None or not memory.get("avail_at_start_gb"):
            return memory
        weights = memory["weights_gb"] + memory.get("draft_weights_gb", 0.0)
        out = dict(memory)
        ratio = tp / self.tp
        out["weights_gb"] = memory["weights_gb"] * ratio
        if "draft_weights_gb" in memory:
            out["draft_weights_gb"] = memory["draft_weights_gb"] * ratio
        if tokens and kv:
            draft_kv = memory.get("draft_kv_cache_gb", 0.0)
            fig = TpFigures(memory["avail_at_start_gb"], weights, kv + draft_kv, tokens)
            moved = fig.at_tp(tp, self.tp, self.kv_heads)
            out["kv_cache_tokens"] = moved.kv_tokens
            # Target and draft pools keep their shares of the KV bytes.
            out["kv_cache_gb"] = moved.kv_gb * kv / (kv + draft_kv)
            if draft_kv:
                out["draft_kv_cache_gb"] = moved.kv_gb * draft_kv / (kv + draft_kv)
        if memory.get("avail_after_weights_gb") is not None:
            out["avail_after_weights_gb"] = memory["avail_at_start_gb"] - weights * ratio
        return out

    def _check(
        self,
        number: int,
        result: TrialResult,
        before: Prediction | None,
        room: float | None,
        kv_tokens: float | None,
        graph_oom: bool,
    ) -> list[Correction]:
        if before is None:
            return []
        found: list[Correction] = []
        if before.fits and result.status is TrialStatus.OOM:
            found.append(
                Correction(
                    number,
                    f"predicted to fit but OOMed at {result.failure.stage.value}"
                    if result.failure
                    else "predicted to fit but OOMed",
                )
            )
        if kv_tokens and before.kv_tokens and abs(before.kv_tokens - kv_tokens) > DISAGREEMENT * kv_tokens:
            found.append(
                Correction(number, f"KV tokens: predicted {before.kv_tokens:.0f}, measured {kv_tokens:.0f}")
            )
        if (
            room is not None
            and before.graph_room_gb is not None
            and abs(before.graph_room_gb - room) > max(0.5, DISAGREEMENT * room)
        ):
            found.append(
                Correction(
                    number, f"graph room: predicted {before.graph_room_gb:.2f} GiB, measured {room:.2f} GiB"
                )
            )
        for corr in found:
            # Learning, not trouble: the correction is tagged on the trial's MLflow run; -v shows it here.
            log.info("memory model corrected by trial %d: %s", corr.trial, corr.what)
        self.corrections.extend(found)
        return found

    # -- predicting ----------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.avail_at_start_gb is not None and self.kv_tokens.known

    def graph_need_at(self, width: float) -> float | None:
        """Graph memory needed at `width`: the fit, raised to any OOM floor at or below that width."""
        estimate = self.graph_need(width) if self.graph_need.known else None
        floors = [gb for w, gb in self.graph_floor if w <= width]
        if floors:
            estimate = max(estimate or 0.0, max(floors) + 0.01)
        return estimate

    def predict(self, config: ServerConfig) -> Prediction:
        f = config.mem_fraction_static
        if f <= self.kv_floor:
            reason = (
                f"mem_fraction_static {fraction_text(f)} is at or below {self.kv_floor:.3f}, "
                "which left no KV pool"
            )
            return Prediction(False, True, FailureStage.KV_ALLOCATION, None, None, None, reason)
        if not self.ready:
            return Prediction(True, False, None, None, None, None, "no trial has loaded weights yet")
        kv = self.kv_tokens(f)
        if kv <= 0:
            minimum = self.kv_tokens.solve(1.0)
            hint = f"; the minimum viable fraction is about {minimum:.3f}" if minimum else ""
            return Prediction(
                False,
                True,
                FailureStage.KV_ALLOCATION,
                kv,
                None,
                None,
                f"no memory left for the KV cache at mem_fraction_static {fraction_text(f)}{hint}",
            )
        room = self.graph_room(f) if self.graph_room.known else None
        need = self.graph_need_at(graph_width(config))
        if room is not None and need is not None and need + GRAPH_SAFETY_GB > room:
            stage = (
                FailureStage.DRAFT_GRAPH_CAPTURE if config.speculative else FailureStage.TARGET_GRAPH_CAPTURE
            )
            return Prediction(
                False,
                True,
                stage,
                kv,
                room,
                need,
                self._graph_reason(graph_width(config), need, room, f),
            )
        return Prediction(True, room is not None and need is not None, None, kv, room, need, "fits")

    def _graph_reason(self, width: float, need: float, room: float, f: float) -> str:
        """Why the graphs do not fit: the fit of the graph rows, or a launch that ran out, whose room had
        to hold the graphs and the rest of start-up (workspaces, a draft loaded late)."""
        floors = [gb for w, gb in self.graph_floor if w <= width]
        if floors and max(floors) + 0.01 >= need:
            return (
                f"a launch at this graph size or below ran out of memory with {max(floors):.2f} GiB free "
                f"after the KV pools for the CUDA graphs and the rest of start-up; {room:.2f} GiB would be "
                f"free at fraction {fraction_text(f)}"
            )
        return f"CUDA graphs need about {need:.2f} GiB, {room:.2f} GiB left at fraction {fraction_text(f)}"

    def fraction_for_room(self, need_gb: float) -> float | None:
        """The fraction at which `need_gb` (plus the safety) fits in the graph room."""
        return self.graph_room.solve(need_gb + GRAPH_SAFETY_GB) if self.graph_room.known else None

    def width_for_room(self, room_gb: float) -> float | None:
        return self.graph_need.solve(room_gb - GRAPH_SAFETY_GB) if len(self.graph_need.points) >= 2 else None

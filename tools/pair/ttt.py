"""Training-time test: the draft unrolled over several of its own steps, as SGLang runs it, and the loss.

The alignment, SpecForge's (`specforge/algorithms/eagle3/model.py`, `specforge/core/eagle3_adapters.py`,
`specforge/modeling/target/target_head.py`) and SGLang's draft extend: for tokens x_0 .. x_{T-1} the target
gives, at each position t, the aux states F_t and the logits L_t of the token after x_t. Step 0 at position
t reads embed(x_{t+1}) and fc(F_t) and proposes the token after x_{t+1}, i.e. matches L_{t+1}. Step k reads
embed(x_{t+1+k}) and step k-1's output at t, sits at RoPE position t + k (SGLang adds 1 to the positions at
each draft step; SpecForge rotates by `position_ids + len(cache)`), attends as `ttt_mask` says, and matches
L_{t+1+k}. Gradients flow through the whole unroll, as in SpecForge.

The loss at a step is SpecForge's: cross-entropy of the draft's draft-vocabulary logits against the target's
distribution restricted to the draft vocabulary and renormalised (or, with `hard`, against the target's
greedy token), over the positions whose predicted token is an answer token and whose target greedy token is
in the draft vocabulary. Steps are weighted 0.8^k (EAGLE-3's and SpecForge's weighting).

Accuracy at step k is the share of answer positions where the draft's top token, mapped to a target id, is
the target's greedy token, out-of-vocabulary targets counting as misses: what greedy verification accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tools.pair.eagle3_draft import KV, Eagle3Draft

# input_ids [b, t] -> (logits [b, t, vocab], concatenated aux states [b, t, 3 * hidden]), without gradients.
TargetFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class StepStats:
    """Sums over batches, per TTT step."""

    steps: int
    loss: list[float] = field(default_factory=list)
    loss_positions: list[int] = field(default_factory=list)
    correct: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("loss", "loss_positions", "correct", "positions"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.steps)

    def add(self, other: StepStats) -> None:
        for k in range(self.steps):
            self.loss[k] += other.loss[k]
            self.loss_positions[k] += other.loss_positions[k]
            self.correct[k] += other.correct[k]
            self.positions[k] += other.positions[k]

    def accuracy(self) -> list[float]:
        return [c / p if p else 0.0 for c, p in zip(self.correct, self.positions, strict=True)]

    def mean_loss(self) -> list[float]:
        return [s / n if n else 0.0 for s, n in zip(self.loss, self.loss_positions, strict=True)]


def chain_accept_length(accuracy: list[float]) -> float:
    """Tokens per verify for a chain (top-k 1) of len(accuracy) draft steps, estimated as
    1 + sum_k prod_{j<=k} acc_j: each step's accuracy stands for its accuracy given the earlier steps were
    right, and the 1 is the token the target adds itself."""
    total, run = 1.0, 1.0
    for a in accuracy:
        run *= a
        total += run
    return total


def ttt_loss(
    draft: Eagle3Draft,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    logits: torch.Tensor,
    aux: torch.Tensor,
    steps: int,
    decay: float = 0.8,
    hard: bool = False,
) -> tuple[torch.Tensor, StepStats]:
    """The weighted loss of one batch (differentiable) and its per-step sums."""
    t = input_ids.shape[1]
    device = input_ids.device
    draft_ids = draft.draft_ids()
    with torch.no_grad():
        greedy = logits.argmax(-1)  # the target's token after each position
        greedy_in_vocab = draft.t2d[greedy]
        if hard:
            # draft index of each target id (only read where the id is in the draft vocabulary)
            to_draft = torch.cumsum(draft.t2d.to(torch.int64), 0) - 1
            teacher = to_draft[greedy]
        else:
            # columns first, then float32: a float32 copy of the full-vocabulary logits would be 6x larger
            teacher = torch.softmax(logits.index_select(-1, draft_ids).float(), dim=-1)
    hidden = draft.project(aux.to(draft.fc.weight.dtype))
    positions = torch.arange(t, device=device)
    cache: list[KV] = []
    stats = StepStats(steps)
    total = hidden.new_zeros((), dtype=torch.float32)
    for k in range(steps):
        # inputs x_{i+1+k} (0 past the end: those positions never reach the loss)
        ids_k = F.pad(input_ids[:, 1 + k :], (0, 1 + k))
        hidden = draft.step(draft.embed(ids_k), hidden, positions + k, cache)
        if t <= 2 + k:
            continue
        # position i predicts token i+2+k; it counts when that token is an answer token
        valid = F.pad(loss_mask[:, 2 + k :], (0, 2 + k))
        rows, cols = valid.nonzero(as_tuple=True)
        # logits only where they are read: the hidden state of every position is needed, its logits are not
        out = draft.logits(hidden[rows, cols]).float()
        src = cols + 1 + k  # the target position whose next-token distribution this step matches
        use = greedy_in_vocab[rows, src]
        logp = F.log_softmax(out, dim=-1)
        if hard:
            ce = -logp.gather(-1, teacher[rows, src].clamp(min=0)[:, None]).squeeze(-1)
        else:
            ce = -(teacher[rows, src] * logp).sum(-1)
        n_use = int(use.sum())
        step_loss = (ce * use).sum() / max(n_use, 1)
        total = total + decay**k * step_loss
        with torch.no_grad():
            pred = draft_ids[out.argmax(-1)]
            stats.loss[k] = float(step_loss) * n_use
            stats.loss_positions[k] = n_use
            stats.correct[k] = int((pred == greedy[rows, src]).sum())
            stats.positions[k] = int(rows.numel())
    return total, stats

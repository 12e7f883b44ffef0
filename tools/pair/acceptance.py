"""Accept length per draft tree, as SGLang measures it, on a held-out chat workload.

    python -m tools.pair.acceptance TARGET DRAFT DATASET OUT_DIR [--trees s3k1d4,...] [--concurrency 1,32]

One SGLang server per tree, all on the one GPU at once: accept length is a property of the draft, the
target and the prompts, not of the GPU's speed, so servers that share a GPU measure it as well as one
alone does (their tok/s mean nothing here and are not reported). Each server's KV pool is capped with
``--max-total-tokens`` so that a dozen fit beside each other whatever ``--mem-fraction-static`` leaves.

Requests go through the product's own benchmark client (`orchestrator.bench.client.run_stage`) with the
product's SGLang request body (greedy, EOS ignored, each answer's length as its token budget, so each
request decodes about what the target would answer): accept length is ``sum(completion_tokens) /
sum(spec_verify_ct)`` over a level's requests, the product's own rule. Writes ``acceptance.json`` and
one server log per tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.bench.client import new_session, run_stage
from orchestrator.bench.textdata import load_sharegpt
from orchestrator.bench.tokenizer import load_tokenizer
from orchestrator.bench.workload import RequestSpec
from orchestrator.engines.engine import read_all
from tools.pair.server import BASE_FLAGS, ENGINE, SGLANG, Launcher, Server, ServerError

log = logging.getLogger(__name__)

# At least 12 trees: chains of 1-6 steps, and top-k 2, 4 and 8 at several depths and budgets.
DEFAULT_TREES = (
    "s1k1d2,s2k1d3,s3k1d4,s4k1d5,s5k1d6,s6k1d7,s2k2d4,s3k2d6,s4k2d8,s3k4d8,s4k4d16,s3k8d16,s5k4d12,s6k8d16"
)
_TREE = re.compile(r"s(\d+)k(\d+)d(\d+)")


@dataclass(frozen=True)
class Tree:
    steps: int
    topk: int
    draft_tokens: int

    @property
    def label(self) -> str:
        return f"s{self.steps}k{self.topk}d{self.draft_tokens}"

    def flags(self) -> list[str]:
        return ["--speculative-num-steps", str(self.steps), "--speculative-eagle-topk", str(self.topk),
                "--speculative-num-draft-tokens", str(self.draft_tokens)]  # fmt: skip


def parse_trees(text: str) -> list[Tree]:
    trees = []
    for part in text.split(","):
        match = _TREE.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"--trees: {part!r} is not sNkNdN (steps, top-k, draft tokens), e.g. s3k1d4")
        tree = Tree(*(int(g) for g in match.groups()))
        if tree.topk == 1 and tree.draft_tokens != tree.steps + 1:
            raise ValueError(
                f"--trees: {part}: a top-k 1 chain verifies steps + 1 tokens "
                f"(s{tree.steps}k1d{tree.steps + 1})"
            )
        trees.append(tree)
    return trees


@dataclass(frozen=True)
class LevelAcceptance:
    concurrency: int
    requests: int
    completion_tokens: int
    verify_steps: int
    accept_length: float | None


def requests_from(dataset: Path, target: Path, max_new_tokens: int) -> list[RequestSpec]:
    """The held-out conversations through the target's chat template, each with its answer's length."""
    tokenizer = load_tokenizer(str(target), vocab_size=0)
    out = []
    for conv in load_sharegpt(dataset).conversations:
        wanted = tokenizer.count(conv.answer) if conv.answer else max_new_tokens
        out.append(
            RequestSpec(tuple(tokenizer.encode_chat(conv.messages)), max(1, min(wanted, max_new_tokens)))
        )
    return out


async def measure(url: str, requests: list[RequestSpec], levels: list[int]) -> list[LevelAcceptance]:
    results = []
    async with new_session(600) as session:
        for c in levels:
            outcomes, _ = await run_stage(url, requests, c, api=ENGINE.api, timeout_s=900, session=session)
            done = [o for o in outcomes if o.success and o.spec_verify_ct]
            tokens = sum(o.completion_tokens for o in done)
            verify = sum(o.spec_verify_ct or 0 for o in done)
            results.append(
                LevelAcceptance(c, len(done), tokens, verify, round(tokens / verify, 4) if verify else None)
            )
    return results


@dataclass
class TreeAcceptance:
    """One tree's accept length per level, or why it has none; and SGLang's own figure from its log."""

    levels: list[LevelAcceptance] = field(default_factory=list)
    error: str = ""
    # The mean of the server's `accept len` over its Decode batch lines (each covers the same number of
    # decode steps), every level together: SGLang's own measure, beside the client's per level.
    log_accept_length: float | None = None
    log_windows: int = 0


def log_accept(log_text: str) -> tuple[float | None, int]:
    """SGLang's accept length over a server's whole log, read by the engine's own log parser, and the
    number of Decode batch lines it averages (each covers the same number of decode steps, so their plain
    mean is accepted tokens over verify steps)."""
    lens = read_all(ENGINE.log_parser(), log_text).report().decode_accept_lens
    return (round(sum(lens) / len(lens), 4) if lens else None), len(lens)


@dataclass
class AcceptanceRun:
    """What `run` measured: every tree's result, and how long starting and measuring took."""

    requests: int
    levels: list[int]
    trees: dict[str, TreeAcceptance] = field(default_factory=dict)
    startup_s: float = 0.0
    measure_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def _measure_all(servers: dict[str, Server], requests: list[RequestSpec], levels: list[int]
                       ) -> dict[str, TreeAcceptance]:  # fmt: skip
    async def one(label: str, server: Server) -> tuple[str, TreeAcceptance]:
        try:
            return label, TreeAcceptance(levels=await measure(server.url, requests, levels))
        except Exception as exc:  # one tree's failure is that tree's result, not the run's
            return label, TreeAcceptance(error=f"{type(exc).__name__}: {exc}")

    return dict(await asyncio.gather(*(one(label, s) for label, s in servers.items())))


def run(target: Path, draft: Path, dataset: Path, out: Path, trees: list[Tree], levels: list[int],
        max_new_tokens: int, base_port: int, launcher: Launcher = SGLANG) -> AcceptanceRun:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    requests = requests_from(dataset, target, max_new_tokens)
    servers: dict[str, Server] = {}
    ready: dict[str, Server] = {}
    result = AcceptanceRun(requests=len(requests), levels=levels)
    started = time.monotonic()
    try:
        for i, tree in enumerate(trees):
            server = Server(port=base_port + i, log_path=out / f"server-{tree.label}.log", launcher=launcher,
                            args=["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                  "--speculative-draft-model-path", str(draft), *tree.flags(), *BASE_FLAGS,
                                  "--mem-fraction-static", "0.85", "--max-total-tokens", "60000",
                                  # Graphs on: without them fourteen servers on one GPU decoded at
                                  # ~35 tok/s each and the first level outlasted the call.
                                  "--cuda-graph-max-bs", str(max(levels)),
                                  "--max-running-requests", str(max(levels))])  # fmt: skip
            servers[tree.label] = server
            server.start()
        for label, server in servers.items():
            try:
                server.wait_ready(max(1.0, 900 - (time.monotonic() - started)))
                ready[label] = server
            except ServerError as exc:
                log.error("%s", exc)
                result.trees[label] = TreeAcceptance(error=str(exc))
        result.startup_s = round(time.monotonic() - started, 1)
        result.trees.update(asyncio.run(_measure_all(ready, requests, levels)))
        result.measure_s = round(time.monotonic() - started - result.startup_s, 1)
    finally:
        for server in servers.values():
            server.stop()
    for label, server in servers.items():
        measured = result.trees.setdefault(label, TreeAcceptance(error="not measured"))
        if server.log_path.exists():
            text = server.log_path.read_text(errors="replace")
            measured.log_accept_length, measured.log_windows = log_accept(text)
    result.trees = {t.label: result.trees[t.label] for t in trees if t.label in result.trees}
    (out / "acceptance.json").write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return result


def table(result: AcceptanceRun) -> list[str]:
    lines = ["tree        " + "".join(f"   c={c:<4}" for c in result.levels) + "   SGLang's log"]
    for label, tree in result.trees.items():
        if tree.error:
            lines.append(f"{label:<12}{tree.error[:90]}")
            continue
        cells = "".join(f"   {r.accept_length:<6}" if r.accept_length else "   -     " for r in tree.levels)
        from_log = f"   {tree.log_accept_length}" if tree.log_accept_length else ""
        lines.append(f"{label:<12}{cells}{from_log}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pair.acceptance", description=__doc__.split("\n")[0]
    )
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("dataset", type=Path, help="ShareGPT-style JSON with the answers (selfdistill.py)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--trees", default=DEFAULT_TREES)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--max-new-tokens", type=int, default=160, help="cap on each answer's length")
    parser.add_argument("--base-port", type=int, default=31000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        trees = parse_trees(args.trees)
        levels = [int(c) for c in args.concurrency.split(",")]
    except ValueError as exc:
        print(f"acceptance: {exc}", file=sys.stderr)
        return 2
    for what, path in (("target", args.target / "config.json"), ("draft", args.draft / "config.json"),
                       ("dataset", args.dataset)):  # fmt: skip
        if not path.is_file():
            print(f"acceptance: {what}: {path} not found", file=sys.stderr)
            return 2
    result = run(
        args.target, args.draft, args.dataset, args.out, trees, levels, args.max_new_tokens, args.base_port
    )
    for line in table(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

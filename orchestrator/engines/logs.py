"""A whole server log read at once by its engine's own reader (what `python -m ...memory.fit --log` reads)."""

from __future__ import annotations

from orchestrator.engines import engine_for
from orchestrator.engines.engine import read_all
from orchestrator.engines.logrecords import LogReport, ResolvedArgs
from orchestrator.spec.engine_catalog import EngineName


def parse_log(text: str, engine: str = EngineName.SGLANG.value) -> LogReport[ResolvedArgs]:
    """``text`` read by engine ``engine``'s log reader, line by line, then finished."""
    return read_all(engine_for(engine).log_parser(), text).report()

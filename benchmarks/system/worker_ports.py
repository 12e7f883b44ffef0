"""Run in every Ray worker of the scale benchmark (Ray's `worker_process_setup_hook`).

Several simulated nodes share one host there, so two trials starting at the same moment on two nodes both
find port 30000 free (`free_port` checks, the server binds a second later) and one of them fails with
"address already in use". Real nodes are separate machines and never race like this, so each worker here
starts its search at its own port instead; the product's check for a free port still runs.
"""

from __future__ import annotations

import os


def spread_ports() -> None:
    import orchestrator.node.trial as trial
    from orchestrator.node.backends import free_port

    start = 20000 + (os.getpid() % 1000) * 20

    def own_range(host: str, start_at: int = start, attempts: int = 200) -> int:
        return free_port(host, start_at, attempts)

    trial.free_port = own_range  # type: ignore[assignment]

"""``python -m orchestrator.sweep [SPEC]``: run a sweep. The command line itself is `orchestrator.cli`;
this name stays because it is the one users type (and `Sweep`, the loop, is
`orchestrator.driver.loop.sweep`)."""

import sys

try:
    from orchestrator.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line's modules load: nothing has started
    print("\ninterrupted while starting: nothing was launched", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())

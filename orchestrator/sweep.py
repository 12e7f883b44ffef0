"""``python -m orchestrator.sweep [SPEC]``: run a sweep. The command line itself is `orchestrator.cli`;
this name stays because it is the one users type (and `Sweep`, the loop, is
`orchestrator.driver.loop.sweep`)."""

import sys

from orchestrator.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m orchestrator.report STUDY`: write a study's HTML report (`report.page.main`)."""

import sys

from orchestrator.report.page import main

if __name__ == "__main__":
    sys.exit(main())

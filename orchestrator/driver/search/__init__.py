"""The search space as Optuna walks it (`space`), the values each field can take (`grid`), the plain words
a failed trial is explained in, with advice snapped to that grid (`diagnosis`), and an earlier study's
trials seeding this one's search (`history`, the warm start)."""

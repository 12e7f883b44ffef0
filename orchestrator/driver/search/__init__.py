"""The search space as Optuna walks it (`space`), the values each field can take (`grid`) and the plain
words a failed trial is explained in, with advice snapped to that grid (`diagnosis`)."""

"""What the libraries print that a user of the CLI cannot act on, silenced unless `-v` is given."""

from __future__ import annotations

import logging
import os
import warnings

# Ray's notice that it turned token authentication on and generated a token for the instance it was
# asked to start: the sweep started that instance itself, so there is nothing for the user to do.
RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
# group=True is experimental in Optuna 5; the sweep chose it on purpose (see
# orchestrator/driver/store/study.py).
OPTUNA_GROUP_WARNING = r"Argument ``group`` is an experimental feature"


def quiet_libraries(verbose: bool, local_ray: bool) -> None:
    """Keep the console to the sweep's own lines. With `verbose`, leave every library as it is."""
    for noisy in ("alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if verbose:
        return
    # MLflow sets its loggers' level from this variable when it is first imported, which comes after this
    # call ("Creating initial MLflow database tables..." on every fresh store); a user's own value stands.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore", message=OPTUNA_GROUP_WARNING)
    # Optuna sets its own logger to INFO when it is first imported, so set its verbosity through it:
    # "A new study created in RDB/memory" (one for each scratch study the report makes) says nothing.
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if local_ray:
        logging.getLogger(RAY_TOKEN_LOGGER).setLevel(logging.ERROR)

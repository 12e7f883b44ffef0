"""The sweep's answer, written into the Optuna study's user attributes when best.json is written.

Optuna's best trial is the single highest launch (a lucky one, often); the answer is a configuration's
median over its launches (`driver.answer.choose`). The dashboard cannot be told another best trial, so the
study's attributes say what the answer is.
"""

from __future__ import annotations

import optuna

from orchestrator.driver.answer.best_file import BEST_JSON, BestFile
from orchestrator.driver.store.trial_attrs import StudyAttr


def record_answer(study: optuna.Study, best: BestFile) -> None:
    study.set_user_attr(StudyAttr.ANSWER_TRIALS, list(best.launches))
    study.set_user_attr(StudyAttr.ANSWER_TOK_PER_S, best.median_tok_per_s)
    study.set_user_attr(StudyAttr.ANSWER_CONFIG, best.config_label)
    study.set_user_attr(
        StudyAttr.ANSWER_NOTE,
        f"the answer ({BEST_JSON}) is the median tok/s of the configuration's launches (trials "
        f"{', '.join(map(str, best.launches))}); Optuna's best trial is the single highest launch",
    )

"""What a sweep keeps and reads back: the Optuna study (`study`, its attribute names `trial_attrs`), the
one driver allowed on it (`study_lock`, `study_guard`), the journal of settled records (`journal`),
--resume (`restore`), an earlier study's trials (`history`) and the MLflow runs (`tracking`)."""

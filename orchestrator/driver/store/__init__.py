"""What a sweep keeps and reads back: the Optuna study (`study`, its attribute names `trial_attrs`, what it
is told of a trial `optuna_tell`), the one driver allowed on it (`study_lock`), the journal of settled
records (`journal`) and the MLflow runs (`tracking`). It imports no other room of the driver but
`dispatch`'s record of the servers it launched: the loop, the search and the answer stand on it."""

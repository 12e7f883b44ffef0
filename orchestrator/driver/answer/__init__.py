"""The sweep's one answer: confirmation launches (`confirm`), the choice and its verdict (`choose`, with the
noise of `noise`), what the console prints (`conclusion`) and what is written (`summary`, `best_file`)."""

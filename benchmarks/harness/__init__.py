"""What every benchmark shares: the one results table, the paths read and written, Optuna kept quiet."""

"""The driver: the only process that asks Optuna, tells it, and records to MLflow.

Importing this package loads nothing heavy; Ray is loaded by ``driver.sweep`` and the Ray executor.
"""

"""What every strategy spends: noisy, paid launches within a GPU-hour budget, and what a run leaves."""

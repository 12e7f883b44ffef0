"""The search-efficiency benchmark: specsweep and the peers on noisy, paid launches, scored by regret."""

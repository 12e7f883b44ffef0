"""The strategies specsweep is scored against, and their one registry (`peers.registry`)."""

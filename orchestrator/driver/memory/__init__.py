"""Memory before any launch: the prior from the models' config.json (`prior`, `prior_model`), the bounds
launches teach (`bounds`), whether a KV pool would retract under the probe (`kv_admission`), and
`python -m orchestrator.driver.memory.fit`."""

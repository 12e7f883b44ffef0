"""The driver's memory model, one class chain in one folder: the learned model (`learned.MemoryModel`),
the bounds launches teach on top of it (`bounds.BoundedMemoryModel`) and the analytic prior under both
(`prior_model.PriorMemoryModel`, from `prior`'s arithmetic over a node's facts, `facts.MemoryFacts`, read by
`node_facts`), built for a
sweep by `build`; whether a KV pool would retract under the probe (`kv_admission`), the peak a ready
server's forwards take (`serving`), which tp holds the weights (`tp_fit`), and
`python -m orchestrator.driver.memory.fit` (its serving check under load in `fit_serving`)."""

"""One trial on a node, inside a Ray task: GPU check, launch, watch the log, benchmark, GPU check.

`trial` runs it (`run_trial`, `TrialRun`), `backends` says how a node launches and probes (`RealNode`,
`SimulatedNode`), `trial_startup` watches the server start, `trial_bench` benchmarks it, `trial_load` and
`trial_files` are the trial's KV probe and files. The GPU check
(`orchestrator.gpu`) and the scrubbing of secrets (`orchestrator.secrets`) are shared leaves one floor
down: the simulated server and the driver use them too, without importing the node.

Importing this package loads nothing: Ray, the server and the benchmark client come with `trial`.
"""

"""One trial on a node, inside a Ray task: GPU check, launch, watch the log, benchmark, GPU check.

`trial` runs it (`run_trial`, `TrialRun`), `backends` says how a node launches and probes (`SglangNode`,
`SimulatedNode`), `trial_load` and `trial_files` are the trial's KV probe and files, `gpu` checks the
GPUs and `secrets` scrubs what leaves the node. `gpu` and `secrets` are leaves shared beyond the node:
the simulated server reads `gpu.visible_indices`, the driver's spec checks secret flags and its MLflow
writer masks them.

Importing this package loads nothing: Ray, the server and the benchmark client come with `trial`.
"""

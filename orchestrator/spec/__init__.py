"""The sweep spec, on the driver before any GPU is claimed: its models (`sweep_spec`), the search space's
rules (`search`), its YAML (`unique_yaml`) and error messages (`errors`), and the leaves it checks against
before any engine code loads: the engines' names and owned flags (`engine_catalog`), the datasets it names
(`dataset_ref`) and what SGLang refuses to build (`launch_rules`, applied to the spec's models by
`model_checks`)."""

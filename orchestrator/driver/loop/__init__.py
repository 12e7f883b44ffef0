"""The ask/tell loop (`sweep`) and its parts: its stop rules (`stop_rules`), the deadline and the
confirmation reserve (`reserve`), the first steps of a study and --resume (`resume`), the pure step from
a result to what the study is told (`settle`), the results of trials with no launch (`without_launch`),
what reacts to a settled trial (`observers`, the `lossless` check among them) and what it reports
(`outcome`)."""

"""The ask/tell loop (`sweep.Sweep`) and the parts it is made of, over the state they share (`state`): its
stop rules (`stop_rules`), the deadline and the confirmation reserve (`reserve`), a study's first steps and
--resume (`resume`, over what `restore` rebuilds from the study), the stage reports and pruning
(`pruning`), a trial with no result from its node (`no_result`); and the steps every trial goes through:
the pure step from a result to what the study is told (`settle`), the results of trials with no launch
(`without_launch`), what reacts to a settled trial (`observers`, the `lossless` check among them) and what
the sweep reports (`outcome`)."""

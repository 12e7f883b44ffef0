"""The product's proposal policy: what to launch next, and when the answer is known (`proposal.policy`).

`structure` picks memory flags from the workload and the memory model, `trees` lists the speculative trees
a space holds, `spec_model` fits acceptance and step cost to measured trials and predicts untried trees.
"""

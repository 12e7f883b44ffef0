"""A target and its EAGLE-3 draft: train a draft for a Llama target and save it as SGLang serves it.

`llama_target` runs the target (torch and safetensors only) and captures the aux hidden states SGLang feeds
the draft; `eagle3_draft` is the draft, its SGLang config and safetensors layout; `draft_data` reads the
training sequences and picks the draft vocabulary; `ttt` unrolls the draft over its own steps and computes
the loss; `train_draft` is the command line. Each module's docstring says which SGLang and SpecForge code it
follows.
"""

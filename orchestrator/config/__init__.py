"""One configuration in every form: the searched values (`fields`), a configuration's Optuna, MLflow and
command-line forms (`codec`), its speculative tree (`draft_tree`) and SGLang's adaptive speculation as a
searchable choice (`adaptive`). Shared by the driver, the node and the simulator."""

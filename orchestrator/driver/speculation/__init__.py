"""The speculation model: acceptance and step cost fitted on every launch's stages (`spec_model`), and
its figures for the configurations measured (`predictions`). Its own room because the proposal and the
answer both read it, and the proposal stands on the answer."""

"""Starting, watching and stopping an SGLang (or simulated) server."""

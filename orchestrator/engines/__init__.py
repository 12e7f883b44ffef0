"""The inference engines a trial launches: each engine's own command line, process, log and endpoints.

`engines/sglang/` holds SGLang's (its launch plan, its server process, its log parser)."""

"""SGLang's own: the engine (`engine`: `SglangEngine`, what the product asks of it), its command line
(`command`), its HTTP API as the benchmark client speaks it (`wire`) and its cache flush (`control`), and
its log (`logparse`, `startup_account`, `server_args`, `sglang_lines`, `ranks`, `pyrepr`)."""

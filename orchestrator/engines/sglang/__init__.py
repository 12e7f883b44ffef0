"""SGLang's own: its command line (`command`), its server process (`process`) and its log (`logparse`,
`logrecords`, `startup_account`, `sglang_lines`, `ranks`, `pyrepr`)."""

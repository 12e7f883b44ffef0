"""SGLang's own: the engine (`engine`: `SglangEngine`, what the product asks of it), the flags the sweep owns
(`flags`), its command line (`command`), its server process (`process`) and its log (`logparse`,
`logrecords`, `startup_account`, `sglang_lines`, `ranks`, `pyrepr`)."""

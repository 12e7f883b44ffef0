"""What a model and its CUDA graphs take on a GPU, known before anything launches: a model's shape from
its config.json (`shape`), the graph-memory constants measured on SGLang's logs (`graph_costs`), and
SGLang's default graph settings and scheduler constants (`sglang_defaults`). Both the driver's memory
model and the simulated server read them, so they stand below both."""

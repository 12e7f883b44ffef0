"""What a model and its CUDA graphs take on a GPU, known before anything launches: a model's shape from
its config.json (`shape`) and the graph-memory constants measured on SGLang's logs (`graph_costs`). Both
the driver's memory prior and the simulated server read them, so they stand below both."""

"""The benchmarks that run the product's own processes: give-up time, overhead, the client's ceiling,
scale."""

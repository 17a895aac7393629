"""Benchmarks (``detect-bench``): raw backend throughput of an artifact, FLOPs; the HTTP load benchmark
lives with the service (``service.bench``) and is dispatched from here."""

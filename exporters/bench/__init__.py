"""Benchmarks (``detect-bench``): HTTP load against a running service, raw backend throughput."""

"""Benchmarks of the service (``detect-bench http``): HTTP load against a running server, and the raw
throughput of a service backend it is compared with. Imports no torch: runs from the serve-only install."""

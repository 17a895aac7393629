"""Benchmarks (``detect-bench``), one room per purpose: HTTP and open-loop load clients (`bench.load`), the
servers they run against or are compared with (`bench.server`), camera streams and their replay
(`bench.streams`), the queueing model of a server (`bench.model`) and exported artifacts on their backends
(`bench.backend`). The service never imports this package: it stays out of the serving path."""

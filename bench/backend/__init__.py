"""Exported artifacts on their backends (``detect-bench backend``): latency and throughput per batch size,
every CPU runtime and precision side by side, FLOPs of a checkpoint. torch, onnx and the exporters are
imported inside the functions that need them, so the serve-only install still lists the command."""

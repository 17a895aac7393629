"""Checkpoint -> ONNX -> TensorRT, with verification and benchmarks (``detect-export``, ``detect-bench``).

One export pipeline (``onnx_export``) serves every architecture through a small wrapper per architecture
(``wrappers``); the shared in-graph post-processing is ``postprocess_graph``; ``verify`` and ``fp16``
compare exported graphs with eager PyTorch and with FP32; ``tensorrt_build`` is the only module that
knows TensorRT. Artifacts follow ``service.manifest`` (the one import from ``service``).
"""

"""Checkpoint -> ONNX -> TensorRT, with verification and benchmarks (``detect-export``, ``detect-bench``).

One export pipeline (``onnx_export``) serves every architecture through a small wrapper per architecture
(``wrappers``); the shared in-graph post-processing is ``postprocess_graph``; ``verify`` and ``fp16``
compare exported graphs with eager PyTorch and with FP32; ``tensorrt_ops`` / ``tensorrt_engine`` /
``tensorrt_build`` are the only modules that know TensorRT (engines are checked through the service's
TensorRT backend, the code that serves them). ``manifests`` builds every manifest an export writes;
artifacts follow ``contract.manifest``.
"""

"""Detectors trained elsewhere -> this project's verified artifacts (``detect-export import``).

A source model (TFLite, or ONNX) is wrapped so that it obeys the same output contract as the project's own
exports: the graph takes uint8 NHWC images, normalizes them as the source expects, runs the source network
unchanged, decodes its head (SSD anchors and a box coder, or boxes that are already decoded) and runs the
project's in-graph NMS (``exporters.onnx.postprocess_graph``). The artifact is written only when it agrees
with the source's own runtime on sample images (``verify``).
"""

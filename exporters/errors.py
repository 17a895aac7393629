"""The exporters' small explicit exceptions; ``exporters.cli`` maps each to one exit code and message."""

from __future__ import annotations


class ExportError(Exception):
    """Base class: a bad input to an export command (the message says which input and why)."""


class OutputExistsError(ExportError):
    """The output directory already exists and ``--force`` was not given."""


class InvalidModelError(ExportError):
    """A file handed to a command is not a readable, valid ONNX model or artifact."""


class VerificationError(ExportError):
    """The exported graph does not match eager PyTorch (or FP16 does not match FP32) within tolerance."""


class GpuRequiredError(ExportError):
    """A step needs an NVIDIA GPU (TensorRT engine build) and none is available on this machine."""

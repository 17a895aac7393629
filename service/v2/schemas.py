"""Bodies of the Open Inference Protocol's REST API (requests parsed strictly, responses documented)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RequestInput(BaseModel):
    """One input tensor: ``data`` in JSON (flat or nested, row-major), or ``binary_data_size`` bytes of
    the binary section (``parameters``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    data: Any = None


class RequestOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    inputs: list[RequestInput] = Field(min_length=1)
    outputs: list[RequestOutput] | None = None


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int] = Field(description="-1 marks a variable dimension (the batch)")


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class RepositoryIndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ready: bool = Field(default=False, description="list only the model versions that are ready")


class RepositoryIndexItem(BaseModel):
    name: str
    version: str
    state: str = Field(description="READY | LOADING | UNAVAILABLE")
    reason: str = Field(description="why a version is unavailable")


class RepositoryRequest(BaseModel):
    """Body of load / unload (optional). Configuration or file overrides in ``parameters`` are refused."""

    model_config = ConfigDict(extra="forbid")

    parameters: dict[str, Any] = Field(default_factory=dict)

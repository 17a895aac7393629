"""Bodies of the Open Inference Protocol's REST API (requests parsed strictly, responses documented)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RequestInput(BaseModel):
    """One input tensor: ``data`` in JSON (flat or nested, row-major), or ``binary_data_size`` bytes of
    the binary section (``parameters``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the model's input (UINT8 images at the network size) or image_bytes")
    shape: list[int]
    # The enum is documentation only: `service.v2.tensors` refuses other datatypes, naming the right one.
    datatype: str = Field(json_schema_extra={"enum": ["UINT8", "BYTES"]})
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
    inputs: list[RequestInput] = Field(
        min_length=1,
        description="exactly one input",
        json_schema_extra={"maxItems": 1},  # documentation: `service.v2.tensors` refuses more, saying why
    )
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
    # strict: ``"ready": "yes"`` is an error, not true.
    model_config = ConfigDict(extra="forbid", strict=True)

    ready: bool = Field(default=False, description="list only the model versions that are ready")


class RepositoryIndexItem(BaseModel):
    name: str
    version: str
    state: str = Field(description="READY | LOADING | UNAVAILABLE")
    reason: str = Field(description="why a version is unavailable")


class RepositoryRequest(BaseModel):
    """Body of load / unload (optional). Configuration or file overrides in ``parameters`` are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    parameters: dict[str, Any] = Field(default_factory=dict)


class RepositoryLoadRequest(RepositoryRequest):
    """Body of load (optional), as documented: the route refuses any ``parameters`` with 400."""

    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="must be empty: configuration or file overrides are not supported (put the model's "
        "files in the repository folder)",
        json_schema_extra={"maxProperties": 0},
    )


class RepositoryRolloutRequest(BaseModel):
    """Body of rollout: the candidate version and its canary and shadow shares (KServe's
    ``canaryTrafficPercent``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    candidate: str = Field(
        min_length=1, description="the version folder to roll out beside the one that serves"
    )
    canary_percent: float = Field(
        default=0.0, ge=0, le=100, description="share of requests naming no version that it answers"
    )
    shadow_percent: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description="share of the serving version's requests also sent to it as a copy, to compare",
    )


class RepositoryRollout(BaseModel):
    name: str
    serving: str = Field(description="the version that answers the requests outside the canary share")
    candidate: str
    canary_percent: float
    shadow_percent: float
    state: str = Field(description="active | ended")


class ResponseOutput(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] | None = Field(
        default=None, description="binary outputs: ``binary_data_size``, their bytes in the binary section"
    )
    data: list[Any] | None = Field(default=None, description="JSON outputs: the values, flat, row-major")


class InferResponse(BaseModel):
    """An inference response's JSON part (documentation: the route writes it directly)."""

    model_name: str
    model_version: str
    id: str | None = Field(default=None, description="the request's id, when it had one")
    outputs: list[ResponseOutput]

"""Service configuration: one `Settings` read from ``DETECT_*`` environment variables.

Every knob has a default that works on a laptop; the CLI (`service.cli`) overrides a few from flags.
Per-model batching overrides come as JSON, e.g.::

    DETECT_MODEL_OVERRIDES='{"ssd300": {"max_batch_size": 4, "max_queue_delay_ms": 2}}'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

BackendChoice = Literal["auto", "cpu", "cuda", "tensorrt-ep", "tensorrt"]
LogLevel = Literal["critical", "error", "warning", "info", "debug"]


class ModelOverride(BaseModel):
    """Batching knobs for one model; a field left unset falls back to the global setting."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int | None = Field(default=None, gt=0)
    max_queue_delay_ms: float | None = Field(default=None, ge=0)
    max_queue_size: int | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class BatchingConfig:
    """Resolved batching knobs for one model (global settings, then its override, then its artifact's cap)."""

    max_batch_size: int
    max_queue_delay_s: float
    max_queue_size: int


class Settings(BaseSettings):
    """All service settings. Environment variables are ``DETECT_<FIELD NAME>`` (case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix="DETECT_", extra="ignore", protected_namespaces=())

    # Where models live: <model_repository>/<name>/<version>/{manifest.json, model.onnx|model.plan}.
    model_repository: Path = Path("models")
    # "latest": load the highest version of each model; "all": load every version (each costs memory).
    versions: Literal["latest", "all"] = "latest"
    # Model used when a request names none; default: the first model name in sorted order.
    default_model: str | None = None

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)

    # Dynamic batching (per model; see `model_overrides`).
    max_batch_size: int = Field(default=8, gt=0)
    max_queue_delay_ms: float = Field(default=5.0, ge=0)
    max_queue_size: int = Field(default=64, gt=0)
    model_overrides: dict[str, ModelOverride] = Field(default_factory=dict)

    # A request that cannot start inference within this time of arriving is answered 504.
    request_timeout_ms: float = Field(default=10_000.0, gt=0)
    # Request body limit, enforced while the body streams in (not trusted from Content-Length alone).
    max_body_bytes: int = Field(default=20 * 1024 * 1024, gt=0)
    # Decompression-bomb guard: width * height read from the image header before decoding.
    max_image_pixels: int = Field(default=40_000_000, gt=0)
    max_images_per_request: int = Field(default=16, gt=0)

    # Inference runtime. "auto" uses the GPU (TensorRT EP, else CUDA EP) only when one really exists.
    backend: BackendChoice = "auto"
    # Where the TensorRT execution provider caches the engines it builds (None: rebuild at every start).
    trt_cache_dir: Path | None = None
    intra_op_threads: int = Field(default=0, ge=0)  # 0 = runtime default
    inter_op_threads: int = Field(default=0, ge=0)  # 0 = runtime default
    # Threads for decode, resize, mask pasting and rendering (inference has its own thread per model).
    worker_threads: int = Field(default=2, gt=0)

    # On SIGTERM: readiness fails at once, new requests get 503, in-flight ones get this long to finish.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    log_level: LogLevel = "info"
    access_log: bool = True
    # Run one inference per model before reporting ready (first runs allocate and compile kernels).
    warmup: bool = True

    def batching_for(self, model_name: str, artifact_max_batch_size: int) -> BatchingConfig:
        """Batching knobs for ``model_name``; the batch size never exceeds what the artifact accepts."""
        override = self.model_overrides.get(model_name, ModelOverride())
        batch = override.max_batch_size if override.max_batch_size is not None else self.max_batch_size
        delay_ms = (
            override.max_queue_delay_ms
            if override.max_queue_delay_ms is not None
            else self.max_queue_delay_ms
        )
        queue = override.max_queue_size if override.max_queue_size is not None else self.max_queue_size
        return BatchingConfig(
            max_batch_size=min(batch, artifact_max_batch_size),
            max_queue_delay_s=delay_ms / 1000.0,
            max_queue_size=queue,
        )

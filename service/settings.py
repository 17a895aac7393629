"""Service configuration: one `Settings` read from ``DETECT_*`` environment variables.

Every knob has a default that works on a laptop; the CLI (`service.cli`) overrides a few from flags.
Per-model overrides come as JSON, e.g.::

    DETECT_MODEL_OVERRIDES='{"ssd300": {"max_batch_size": 4, "max_queue_delay_ms": 2}}'

and a model ships its own defaults for the same fields in ``<repository>/<name>/serving.json``
(`Settings.for_model`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# off | auto | WIDTHxHEIGHT (sides checked per request: service.imaging.tiling).
TILING_PATTERN = r"^(off|auto|\d{1,6}x\d{1,6})$"
BackendChoice = Literal["auto", "cpu", "cuda", "tensorrt-ep", "tensorrt", "openvino"]
LogLevel = Literal["critical", "error", "warning", "info", "debug"]


def _default_openvino_cache() -> Path:
    """``$XDG_CACHE_HOME/detect/openvino`` (default ``~/.cache/detect/openvino``; without a home folder,
    under the temporary folder)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (KeyError, RuntimeError):  # no $HOME and no passwd entry for this user
            base = tempfile.gettempdir()
    return Path(base) / "detect" / "openvino"


class ModelOverride(BaseModel):
    """Serving knobs for one model; a field left unset falls back to the global setting. They come from
    ``DETECT_MODEL_OVERRIDES`` and from the model's own ``serving.json`` in the repository
    (`Settings.for_model` says which wins)."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int | None = Field(default=None, gt=0)
    max_queue_delay_ms: float | None = Field(default=None, ge=0)
    max_queue_size: int | None = Field(default=None, gt=0)
    # This model's default tiling (off | auto | WIDTHxHEIGHT), e.g. auto for a drone-imagery model.
    tiling: str | None = Field(default=None, pattern=TILING_PATTERN)
    # How this model runs on OpenVINO, and where its images decode (the global settings of the same names).
    openvino_streams: int | None = Field(default=None, ge=1, le=64)
    openvino_solo_graph: bool | None = None
    decode_in_batch: bool | None = None


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
    # Model used when a request names none; unset: the repository's file 'default', else its only model
    # (several and none declared: requests must name one; see service/runtime/default_model.py).
    default_model: str | None = None
    # The live model repository (Open Inference Protocol repository extension): POST /v2/repository/index
    # and /v2/repository/models/{name}/load|unload, behind the API key when keys are set. Off by default (as
    # Triton's model control mode "none"): without keys anyone who reaches the port could unload models.
    repository_api: bool = False
    # Poll the repository folder every this many seconds: load new or changed models, unload removed ones.
    repository_poll_s: float | None = Field(default=None, gt=0)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)

    # Dynamic batching (per model; see `model_overrides`).
    max_batch_size: int = Field(default=8, gt=0)
    max_queue_delay_ms: float = Field(default=5.0, ge=0)
    max_queue_size: int = Field(default=64, gt=0)
    # A request that finds its model's worker idle starts at once; batches form from what arrives while
    # the worker is busy. False: it waits up to max_queue_delay_ms for others to batch with.
    dispatch_when_idle: bool = True
    # How a batch closes: "fixed" (full, max_queue_delay_ms, deadline, and with dispatch_when_idle an idle
    # worker), "adaptive" (the default: closes as fixed; the free worker then takes only the share of the
    # batch that pays, judged on the time each batch size measured and the arrival rate: one by one at low
    # load, larger batches once arrivals outpace single requests; service/runtime/batching/batch_close.py;
    # measured against the others in docs/benchmarks/batching.md) or
    # "latency" (from the fitted batch times, the arrival rate and batch_latency_budget_ms, a batch stops
    # growing when one more request would keep its oldest one past that budget).
    batch_policy: Literal["fixed", "adaptive", "latency"] = "adaptive"
    # While every inference worker of a model is busy, the next batch waits on deck, and the first worker
    # thread whose batch ends starts it at once, without a round trip through the event loop
    # (service/runtime/batching/worker_pool.py). One batch at most; stream frames never go there.
    batch_on_deck: bool = True
    # Each request's latency budget: the latency policy's limit on a batch's growth; the adaptive policy
    # runs a batch that takes longer than a quarter of it only once shorter batches fall behind the arrivals
    # (with several OpenVINO streams, never).
    batch_latency_budget_ms: float = Field(default=100.0, gt=0)
    # Opt-in (0 = off): while requests come one at a time and nothing else runs in the service, a batch
    # whose fitted time is at most inline_max_ms and image work on at most inline_max_pixels decoded pixels
    # run on the event loop itself, saving a lone request its thread hand-offs; the loop is then blocked at
    # most about that long. Measured: -0.01 to +0.09 of raw at concurrency 1, a longer p99 under Poisson load
    # at half capacity (docs/cpu-inference.md, "Inline when idle").
    inline_max_ms: float = Field(default=0.0, ge=0)
    inline_max_pixels: int = Field(default=1_000_000, ge=0)
    # Once the models at startup are loaded and warmed, freeze the heap out of the garbage collector's full
    # collections (gc.freeze; unfrozen on shutdown): those took 60-90 ms with every Python thread stopped,
    # ~1.5 ms after it (service/runtime/heap.py, docs/cpu-inference.md "Garbage-collector pauses").
    gc_freeze: bool = True
    # glibc's malloc: blocks of at least this many KiB get mappings of their own, returned to the system
    # when freed (request bodies, large decoded images); smaller ones are reused from the heap. Fixed, so it
    # never rises to 32 MiB and keeps request-sized blocks (service/runtime/memory.py). 128 (glibc's first
    # value) maps, page-faults and unmaps every network-sized array per request: 0.35-0.45 ms more system
    # CPU per request on the default model (docs/benchmarks/request-path.md, "The mmap threshold").
    malloc_mmap_threshold_kib: int = Field(default=1024, ge=128, le=32768)
    model_overrides: dict[str, ModelOverride] = Field(default_factory=dict)

    # A request that cannot start inference within this time of arriving is answered 504.
    request_timeout_ms: float = Field(default=10_000.0, gt=0)
    # Request body limit, enforced while the body streams in (not trusted from Content-Length alone).
    max_body_bytes: int = Field(default=20 * 1024 * 1024, gt=0)
    # Decompression-bomb guard: width * height read from the image header before decoding.
    max_image_pixels: int = Field(default=40_000_000, gt=0)
    max_images_per_request: int = Field(default=16, gt=0)
    # Decoded pixels of all a request's images together (JPEGs decoded at reduced scale count as such).
    max_request_pixels: int = Field(default=48_000_000, gt=0)

    # Memory budgets (bytes), process-wide, so peak RSS is bounded by settings (docs/hardening.md):
    # request bodies being received or held, and decoded images (4 bytes per decoded pixel; 10 for an
    # image kept to draw the boxed answer on).
    # A request that does not fit waits up to admission_wait_ms for room, then gets 503 + Retry-After.
    body_memory_bytes: int = Field(default=96 * 1024 * 1024, gt=0)
    image_memory_bytes: int = Field(default=320 * 1024 * 1024, gt=0)
    admission_wait_ms: float = Field(default=2_000.0, ge=0)
    # Decode large JPEGs at a reduced scale (libjpeg DCT scaling) when only the network input is needed.
    reduced_jpeg_decode: bool = True

    # Tiled inference for large images (docs/tiling.md): the default of requests that send no `tiling`
    # (off | auto | WIDTHxHEIGHT; per model in model_overrides). Each tile is one network input, counted
    # against the tile budget below and the expected-wait admission.
    tiling: str = Field(default="off", pattern=TILING_PATTERN)
    # The tile budget of one request (not max_images_per_request: a tile is a network input, ~0.2-0.8 MB,
    # not a decoded image): at most this many network inputs, and for tiling=auto at most what the model
    # runs in tiling_max_seconds at its measured throughput (larger tiles otherwise). Tiles are queued a
    # batch or two at a time, so single images sent meanwhile overtake a large tiled request.
    max_tiles_per_request: int = Field(default=256, gt=0)
    # At most half of request_timeout_ms is used: an auto request's tiles must be done before its deadline.
    tiling_max_seconds: float = Field(default=5.0, gt=0)
    # Tiles are queued this many at a time (the next batch once the last is done), after interactive images:
    # a single image sent meanwhile waits for at most one running batch of this size.
    tiling_batch_size: int = Field(default=1, gt=0)
    # Neighbouring tiles overlap by this fraction of the tile side (requests: tile_overlap).
    tiling_overlap: float = Field(default=0.2, ge=0, le=0.75)
    # Also run the whole image, downscaled, for objects larger than a tile.
    tiling_full_image: bool = True
    # tiling=auto tiles an image only when it is more than this many times the network input along a side.
    tiling_auto_min_scale: float = Field(default=2.0, ge=1)
    # How the tiles' detections are merged, class by class: nms (drop the lower-scored of overlapping boxes)
    # or greedy_nmm (also join boxes cut at a tile border into one), by iou or ios (intersection over the
    # smaller box). Defaults chosen by measurement (docs/tiling.md).
    tiling_merge: Literal["nms", "greedy_nmm"] = "greedy_nmm"
    tiling_match_metric: Literal["iou", "ios"] = "iou"
    tiling_match_threshold: float = Field(default=0.5, gt=0, le=1)

    # Timeouts (seconds). A body that stalls for body_idle_timeout_s, or takes longer than body_timeout_s
    # in all, gets 408; request headers must arrive within header_timeout_s of the connection opening
    # (or of the previous response); idle keep-alive connections close after keep_alive_timeout_s.
    body_idle_timeout_s: float = Field(default=5.0, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    header_timeout_s: float = Field(default=10.0, gt=0)
    keep_alive_timeout_s: int = Field(default=5, gt=0)
    # Open connections beyond this get 503 at once (JSON, then the connection closes).
    max_connections: int = Field(default=256, gt=0)
    # A request line and headers longer than this get 431 (JSON, then the connection closes).
    max_header_bytes: int = Field(default=16384, ge=1024)
    # The HTTP/1.1 parser: httptools (C; less of the event loop's time per request) or h11 (pure Python).
    # Both keep the same limits and answer errors alike (service/http/connection_limits.py).
    http_parser: Literal["httptools", "h11"] = "httptools"

    # Authentication: API keys accepted as `Authorization: Bearer <key>` or `X-API-Key: <key>`, from a
    # comma-separated list and/or a file of one key per line ('#' comments). None of either: no auth.
    # Probes (/health/*) stay open; a missing key file is a startup error (fail closed).
    api_keys: SecretStr | None = None
    api_keys_file: Path | None = None
    # Serve /metrics on this separate port (then not on the API port), e.g. for a NetworkPolicy that
    # admits only Prometheus there. None: /metrics on the API port, behind the API key when one is set.
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # The Open Inference Protocol over gRPC (KServe v2 GRPCInferenceService, and the gRPC health protocol) on
    # this port, in the same process and pipeline as the HTTP API (service/grpc/). None: no gRPC server.
    grpc_port: int | None = Field(default=None, ge=0, le=65535)
    # /docs, /redoc and /openapi.json; turn off to expose only the API itself.
    docs: bool = True

    # Inference runtime. "auto" uses the GPU (TensorRT EP, else CUDA EP) only when one really exists.
    backend: BackendChoice = "auto"
    # Where the TensorRT execution provider caches the engines it builds (None: rebuild at every start).
    trt_cache_dir: Path | None = None
    intra_op_threads: int = Field(default=0, ge=0)  # 0 = runtime default
    inter_op_threads: int = Field(default=0, ge=0)  # 0 = runtime default
    # OpenVINO: the inference precision ("manifest": bf16 for bf16 artifacts and for INT8 ones whose manifest
    # says unquantized_precision bf16, else f32; or force f32 | bf16) and where compiled models are cached so
    # restarts skip compiling (empty: no cache).
    openvino_precision: Literal["manifest", "f32", "bf16"] = "manifest"
    openvino_cache_dir: Path | None = Field(default_factory=lambda: _default_openvino_cache())
    # OpenVINO inference streams per model: 1 runs each batch on every core (a lone request's lowest
    # latency); N > 1 splits the cores into N streams that run N batches side by side, one batch worker
    # each (more throughput for small models on few cores, a longer single request). docs/cpu-inference.md,
    # "Inference streams". A model's serving.json may ask for its own (the shipped default model and
    # SSD320: 2).
    openvino_streams: int = Field(default=1, ge=1, le=64)
    # With openvino_streams > 1: also compile a batch-1 graph on one stream of every thread (74 MiB more on
    # the default model), and run a lone interactive request on it while every stream is idle and the
    # requests it would hold up lose less than it saves (docs/batching.md, "The solo graph").
    openvino_solo_graph: bool = True
    # Batch sizes (comma-separated, "" for none) that OpenVINO compiles a static-shape graph for, beside the
    # dynamic one that serves every other size: the dynamic graph runs a batch of 1 ~25% slower and pays
    # ~5 ms whenever the batch size changes. Each graph holds ~70 MB more on the default model; sizes
    # above a model's max batch size are skipped (docs/cpu-inference.md, "Static batch shapes").
    openvino_static_batch_sizes: str = "1"
    # Threads for decode, resize, mask pasting and rendering (inference has its own thread per model).
    worker_threads: int = Field(default=2, gt=0)
    # Decode and resize a request's one image (not tiled, under 4 MP decoded) on the model's inference
    # thread as its batch starts, instead of in a worker thread while the batch before it runs: decoding
    # beside inference slows the runtime's threads, which use every core, by more than it overlaps
    # (docs/benchmarks/request-path.md, "Decoding on the inference thread"). Off: every image is decoded
    # in the worker threads before it is queued. A model's serving.json may turn it on for that model (the
    # shipped default model's and SSD320's do).
    decode_in_batch: bool = False

    # On SIGTERM: readiness fails at once, new requests get 503, in-flight ones get this long to finish.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    log_level: LogLevel = "info"
    access_log: bool = True
    # Run one inference per model before reporting ready (first runs allocate and compile kernels).
    warmup: bool = True
    # What a model version does when its golden inputs disagree at load (docs/operations.md, "Self-check at
    # load"): "warn" serves it anyway (logged at ERROR); "fallback" serves its fp32 parent from the model
    # repository in its place (logged at ERROR, shown in /v1/models and in each answer; with no parent to
    # serve, as "refuse"); "refuse" leaves it not ready (failed), as any failed load.
    self_check_failure: Literal["warn", "fallback", "refuse"] = "fallback"

    # Video files through POST /detect (docs/video.md). A raw body with a video/* Content-Type may be up to
    # video_max_bytes (other bodies, multipart included: max_body_bytes), held in the body memory budget.
    video_max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # Frame size (width * height), checked from the header before any frame is decoded.
    video_max_pixels: int = Field(default=1920 * 1080, gt=0)
    # Reading stops after this many decoded frames (processed or skipped) or this much video time,
    # whatever the header claims; and after video_max_frames processed frames (requests: max_frames).
    video_max_read_frames: int = Field(default=18_000, gt=0)
    video_max_duration_s: float = Field(default=600.0, gt=0)
    video_max_frames: int = Field(default=3_000, gt=0)
    # Frames of one video decoded ahead and queued together (they may share a batch). A video request
    # holds (decoder + 2 x this many frames, + encoder and drawing for format=mp4) x its frame pixels in
    # the image memory budget for its whole run (docs/video.md).
    video_frames_in_flight: int = Field(default=4, gt=0, le=64)
    # Tracking (ByteTrack): a track unmatched for longer than this much video time ends.
    video_track_lost_s: float = Field(default=1.0, gt=0)
    # With detect_every: frames in a row answered with predicted boxes after a detection (then none).
    video_predict_max_frames: int = Field(default=30, ge=0)

    # Sample capture (docs/capture.md): off while capture_dir is unset, and then no image is ever stored.
    # Set, the images the model is unsure about (its top score inside capture_score_band, or fewer than
    # capture_min_detections detections at or above the display threshold) and a random share of the rest
    # are written there as a COCO dataset with the predictions as annotations. Bounded by a disk quota, a
    # rate, a queue and a memory budget for the encoded images waiting to be written.
    capture_dir: Path | None = None
    capture_random_share: float = Field(default=0.0, ge=0, le=1)
    # "LOW,HIGH": capture when the image's top score is within [LOW, HIGH]; "off": no band rule.
    capture_score_band: str = Field(default="0.3,0.6", pattern=r"^(off|\s*[0-9.]+\s*,\s*[0-9.]+\s*)$")
    # Capture when fewer detections than this score at or above the display threshold (0: no such rule).
    capture_min_detections: int = Field(default=1, ge=0)
    capture_max_bytes: int = Field(default=1024 * 1024 * 1024, gt=0)
    capture_max_per_minute: int = Field(default=60, gt=0)
    capture_queue: int = Field(default=16, gt=0)
    capture_memory_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # During a rollout with a shadow share (docs/flywheel.md): keep an image whose serving and candidate
    # versions agree less than this (matched detections / the larger count; 0: never), reason "disagreement".
    capture_disagreement_below: float = Field(default=0.5, ge=0, le=1)

    # Rollouts (service/runtime/rollout.py): at most this many shadow copies run at once (more are dropped
    # and counted), each with this deadline to start on the candidate (a busy candidate drops it).
    rollout_shadow_max_in_flight: int = Field(default=4, gt=0)
    rollout_shadow_timeout_s: float = Field(default=1.0, gt=0)

    # Camera and stream sessions (docs/streams.md). The server opens only URLs that start with one of these
    # comma-separated prefixes (e.g. "rtsp://cameras.local/,http://127.0.0.1:9000/"); empty: sessions off,
    # the /v1/streams endpoints answer 403. file:// and other schemes than rtsp, rtsps, http, https are
    # never opened.
    stream_sources: str = ""
    # Every URL opened for a session is checked, not only the posted one: each redirect hop, an HLS
    # playlist's variants, segments and keys (docs/streams.md, Security). Redirects: "off" (a redirect is
    # an error naming where it points) or "same-allowlist" (followed only to URLs under stream_sources).
    stream_redirects: Literal["off", "same-allowlist"] = "off"
    # The classes of address a source's host name may resolve to, comma-separated: public, private
    # (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), loopback, link-local (169.254/16, the cloud
    # metadata address among them; fe80::/10). An IP address written in a stream_sources prefix is always
    # allowed under that prefix; multicast, 0.0.0.0 and reserved addresses never are.
    stream_address_classes: str = "public"
    # Sessions at once (each holds a reader thread and its newest frame).
    max_streams: int = Field(default=16, gt=0)
    # Frames processed per second of each session: the default and the most a session may ask for.
    stream_fps: float = Field(default=15.0, gt=0)
    stream_max_fps: float = Field(default=30.0, gt=0)
    # A frame with more pixels than this is scaled down (keeping its aspect) when it is converted; a source
    # whose frames have more than 4 times this is refused (its decoder works at the source's resolution).
    stream_max_pixels: int = Field(default=1920 * 1080, gt=0)
    # Opening a source, and each read from it, give up after these many seconds (a source that never
    # answers, or stops sending): the session then reconnects.
    stream_open_timeout_s: float = Field(default=10.0, gt=0)
    stream_read_timeout_s: float = Field(default=5.0, gt=0)
    # How much of an RTSP camera's stream FFmpeg reads to learn its codec and size when it is opened (its
    # default reads ~20 frames, up to 5 s of them, before the first frame: at each reconnect too).
    stream_rtsp_probe_s: float = Field(default=1.0, gt=0)
    # Reconnect backoff: the first wait, doubled after each failure up to the maximum. After this many
    # failures in a row without a frame the session is in state error and stops trying (0: never).
    stream_reconnect_initial_s: float = Field(default=0.5, gt=0)
    stream_reconnect_max_s: float = Field(default=30.0, gt=0)
    stream_reconnect_attempts: int = Field(default=10, ge=0)
    # A frame that could not start inference within this time of its capture is dropped (and counted).
    stream_max_lag_ms: float = Field(default=1000.0, gt=0)
    # Sooner: a detected frame must start inference within this many of the model's measured full-batch
    # times (at least one frame interval of its session, at most stream_max_lag_ms; 0: only that), else
    # it is dropped (expired) and answered by prediction with the frames waiting behind it, so no answer
    # waits longer than this plus the batch it runs in (docs/streams.md, "Lag").
    stream_detect_wait_batches: float = Field(default=2.0, ge=0)
    # The detection budget of stream frames (docs/streams.md, "Detection budget"): this share of the
    # model's measured throughput (images per second in batches of stream_batch_size frames), or a fixed
    # rate of frames per second for all sessions of a model (0: measured; a fixed rate is a hard cap, a
    # measured one lets frames beyond it go on deck whenever nothing waits for the detector). A session
    # with live tracks or motion is detected
    # at least every stream_detect_every_max_frames frames, an idle one at least every
    # stream_idle_detect_s, whatever the budget; the other frames are answered by the tracker, with
    # boxes for at most stream_predict_max_frames frames in a row. A motion score (share of a 1/8-scale
    # grey image that changed) at or above stream_motion_threshold makes a session active. Decisions are
    # taken in rounds stream_schedule_interval_ms apart.
    stream_detect_share: float = Field(default=0.8, gt=0, le=1)
    stream_detect_budget_fps: float = Field(default=0.0, ge=0)
    stream_detect_every_max_frames: int = Field(default=5, ge=1)
    stream_idle_detect_s: float = Field(default=1.0, gt=0)
    stream_predict_max_frames: int = Field(default=15, ge=0)
    stream_motion_threshold: float = Field(default=0.02, gt=0, le=1)
    stream_schedule_interval_ms: float = Field(default=10.0, gt=0, le=1000)
    # A batch carries at most this many stream frames: the batch an interactive request waits for is that
    # short (the stream budget and start deadlines are timed at this size).
    stream_batch_size: int = Field(default=1, gt=0)
    # Server-Sent Events clients per session, and events buffered for each (a slower client loses the
    # oldest; the count is in its stream's metrics).
    stream_max_subscribers: int = Field(default=8, gt=0)
    stream_event_buffer: int = Field(default=32, gt=0)
    # Sessions started with the server and kept while it runs (fixed cameras, e.g. a Kubernetes ConfigMap):
    # a JSON file, a list of {"id", "url", "model", "fps", "classes", "score_threshold"}.
    streams_file: Path | None = None

    @field_validator("openvino_cache_dir", "grpc_port", "capture_dir", "streams_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("openvino_static_batch_sizes")
    @classmethod
    def _batch_size_list(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not all(p.isdigit() and 1 <= int(p) <= 1024 for p in parts):
            raise ValueError(
                f"openvino_static_batch_sizes {value!r}: need batch sizes 1-1024, comma-separated"
            )
        return value

    @field_validator("stream_address_classes")
    @classmethod
    def _address_classes(cls, value: str) -> str:
        names = {p.strip() for p in value.split(",") if p.strip()}
        unknown = names - {"public", "private", "loopback", "link-local"}
        if unknown:
            raise ValueError(
                f"stream_address_classes {value!r}: unknown {sorted(unknown)}; use public, private, "
                "loopback, link-local"
            )
        return value

    @field_validator("capture_score_band")
    @classmethod
    def _ordered_band(cls, value: str) -> str:
        if value != "off":
            low, high = (float(v) for v in value.split(","))
            if not 0 <= low <= high <= 1:
                raise ValueError(f"capture_score_band {value!r}: need 0 <= LOW <= HIGH <= 1")
        return value

    @property
    def stream_source_prefixes(self) -> tuple[str, ...]:
        """`stream_sources` as a tuple of prefixes (empty: stream sessions are off)."""
        return tuple(p.strip() for p in self.stream_sources.split(",") if p.strip())

    @property
    def openvino_static_batches(self) -> tuple[int, ...]:
        """`openvino_static_batch_sizes` as sorted distinct sizes."""
        return tuple(sorted({int(p) for p in self.openvino_static_batch_sizes.split(",") if p.strip()}))

    @property
    def capture_band(self) -> tuple[float, float] | None:
        """`capture_score_band` as (low, high), or None when off."""
        if self.capture_score_band == "off":
            return None
        low, high = (float(v) for v in self.capture_score_band.split(","))
        return low, high

    def for_model(self, model_name: str, shipped: ModelOverride | None = None) -> Settings:
        """These settings as they apply to ``model_name``. Each `ModelOverride` field comes from, first to
        last: the model's entry in ``model_overrides``; the global setting, where the environment (or the
        caller) set it; the model's ``shipped`` defaults (its ``serving.json``); the global default."""
        values = {
            name: value
            for name, value in (shipped or ModelOverride()).model_dump(exclude_none=True).items()
            if name not in self.model_fields_set
        }
        values |= self.model_overrides.get(model_name, ModelOverride()).model_dump(exclude_none=True)
        return self.model_copy(update=values) if values else self

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

"""Prometheus metrics, one registry per app (so several apps, e.g. in tests, never collide).

Stage histograms carry a ``model`` label: decode, preprocess, queue_wait, inference (per batch),
postprocess (selecting detections), encode (the JSON result: mask pasting, RLE / polygons) or render (the
boxed image), each once per image, and the end-to-end request time. Batch size is a histogram, so the mean
batch size is ``rate(detect_batch_size_sum) / rate(detect_batch_size_count)``; why each batch closed is a
counter by ``reason`` (full | delay | deadline | drain | idle | budget | deck). ``detect_model_info`` labels
each loaded model version with its runtime and the inference precision in effect.
``detect_model_self_check`` is the outcome of each version's self-check at load (passed | failed |
absent: no golden inputs) and ``detect_model_self_check_agreement`` the share of its golden detections
this server reproduced (`service.runtime.self_check`).

The detect_quality_* metrics (what each model outputs, beside its manifest's validation baseline) are
described in `service.runtime.quality_metrics`.

For operating the service (k8s/monitoring, docs/operations.md): ``detect_ready`` is what ``/health/ready``
answers (1 or 0, computed at each scrape); the process collector's ``process_resident_memory_bytes`` is the
RSS, and ``detect_memory_bound_bytes`` the peak RSS it should stay under (docs/hardening.md, "The memory
bound"): the RSS measured after the last model finished loading and warming up, plus the request body and
decoded image budgets of the settings.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from service.runtime.batching.close_rules import CLOSE_REASONS
from service.runtime.heap import GcPauses
from service.runtime.quality_metrics import QualityMetrics

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from contract.manifest import Manifest

# Seconds: from sub-millisecond image work to multi-second CPU batches.
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_SIZE_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
STAGES = ("decode", "preprocess", "queue_wait", "inference", "postprocess", "encode", "render")

SELF_CHECK_STATES = ("passed", "failed", "absent")

# Requests whose model is unknown (or not yet resolved) share this label value, which bounds cardinality.
NO_MODEL = "none"


class ModelMetrics:
    """The metrics of one model; implements `service.runtime.batching.batcher.BatcherMetrics`."""

    def __init__(self, parent: ServiceMetrics, model: str):
        self._parent = parent
        self.model = model
        # The per-request and per-batch series, looked up once: `labels()` hashes and locks on every call,
        # and these are observed several times per request on the event loop.
        self._stages = {stage: parent.stages[stage].labels(model=model) for stage in STAGES}
        self._batch_size = parent.batch_size.labels(model=model)
        self._batches = {r: parent.batches.labels(model=model, reason=r) for r in CLOSE_REASONS}
        self._queue_depth = parent.queue_depth.labels(model=model)
        self._solo_batches = parent.solo_batches.labels(model=model)

    def stage(self, stage: str, seconds: float) -> None:
        self._stages[stage].observe(seconds)

    def batch_closed(self, size: int, reason: str) -> None:
        self._batch_size.observe(size)
        self._batches[reason].inc()

    def queue_wait(self, seconds: float) -> None:
        self._stages["queue_wait"].observe(seconds)

    def queue_depth(self, depth: int) -> None:
        self._queue_depth.set(depth)

    def inference(self, seconds: float) -> None:
        self._stages["inference"].observe(seconds)

    def solo_batch(self) -> None:
        self._solo_batches.inc()

    def model_loaded(self, seconds: float) -> None:
        self._parent.model_load_seconds.labels(model=self.model).observe(seconds)
        self._parent.measure_memory_baseline()

    def model_load_failed(self) -> None:
        self._parent.model_load_failures.labels(model=self.model).inc()

    def image_detections(self, scores: np.ndarray, classes: np.ndarray, width: int, height: int) -> None:
        """One image's detections (any threshold) into the detect_quality_* metrics."""
        self._parent.quality.observe(self.model, scores, classes, width, height)


class ServiceMetrics:
    """Every metric the service exports, registered in its own `CollectorRegistry`."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._declare_request_metrics(r)
        self._declare_model_metrics(r)

        # Operations: readiness as the probe answers it, the RSS and the bound it should stay under.
        ProcessCollector(registry=r)
        self.ready = Gauge("detect_ready", "1 when /health/ready answers 200, else 0", registry=r)
        self.memory_bound = Gauge(
            "detect_memory_bound_bytes",
            "Peak RSS bound: the RSS after the last model load and warm-up plus the body and image budgets",
            registry=r,
        )
        self._memory_baseline = 0
        self._memory_budgets = 0
        # How long each garbage collection stopped every Python thread (installed by the app's lifespan).
        self.gc_pauses = GcPauses(r)
        # What the models output, beside their manifests' baselines (service/runtime/quality_metrics.py).
        self.quality = QualityMetrics()
        r.register(self.quality)

    def _declare_request_metrics(self, r: CollectorRegistry) -> None:
        """Per request and per batch: stage times, batch sizes, queue depth, requests by status."""
        self.stages: dict[str, Histogram] = {
            stage: Histogram(
                f"detect_{stage}_seconds",
                f"Time spent in the {stage.replace('_', ' ')} stage"
                + (" (per batch)" if stage == "inference" else " (per image)"),
                ["model"],
                buckets=STAGE_BUCKETS,
                registry=r,
            )
            for stage in STAGES
        }
        self.request_seconds = Histogram(
            "detect_request_seconds",
            "End-to-end time of a detect request, from arrival to the response being handed to the server",
            ["model"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "detect_batch_size",
            "Images per inference batch",
            ["model"],
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.batches = Counter(
            "detect_batches", "Inference batches by why they closed", ["model", "reason"], registry=r
        )
        self.solo_batches = Counter(
            "detect_solo_batches",
            "Lone requests run on the solo graph (one image on every thread, DETECT_OPENVINO_SOLO_GRAPH)",
            ["model"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "detect_queue_depth", "Images waiting to start inference", ["model"], registry=r
        )
        self.in_flight = Gauge("detect_in_flight_requests", "Detect requests being handled", registry=r)
        self.requests = Counter(
            "detect_requests", "Detect requests by model and HTTP status code", ["model", "code"], registry=r
        )
        self._request_series: dict[tuple[str, int], tuple[Any, Any]] = {}
        # Inference calls of the Open Inference Protocol over gRPC (service/grpc/), by gRPC status code name;
        # their end-to-end time goes into detect_request_seconds with every other protocol's.
        self.grpc_requests = Counter(
            "detect_grpc_requests",
            "gRPC inference calls by model and gRPC status code",
            ["model", "code"],
            registry=r,
        )

    def _declare_model_metrics(self, r: CollectorRegistry) -> None:
        """Per model version: readiness, loading, runtime and precision, the self-check at load."""
        self.model_ready = Gauge(
            "detect_model_ready",
            "1 when the model version is loaded, warmed up and batching",
            ["model", "version"],
            registry=r,
        )
        # The live model repository: what is loaded, how long loading (with warm-up) took, what failed.
        self.loaded_models = Gauge(
            "detect_loaded_models", "Model names serving at least one version", registry=r
        )
        self.loaded_versions = Gauge("detect_loaded_model_versions", "Model versions loaded", registry=r)
        self.model_load_seconds = Histogram(
            "detect_model_load_seconds",
            "Time to load and warm up one model version",
            ["model"],
            buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
            registry=r,
        )
        self.model_load_failures = Counter(
            "detect_model_load_failures", "Model versions that failed to load", ["model"], registry=r
        )
        self.model_info = Gauge(
            "detect_model_info",
            "1 per loaded model version, labelled with its runtime and the inference precision in effect",
            ["model", "version", "backend", "precision"],
            registry=r,
        )
        # The self-check at load (service/runtime/self_check.py): golden inputs run on this server's CPU.
        self.model_self_check = Enum(
            "detect_model_self_check",
            "Self-check of the model version at load: its golden inputs run here agree (passed) or not "
            "(failed), or the artifact has none (absent)",
            ["model", "version"],
            states=list(SELF_CHECK_STATES),
            registry=r,
        )
        self.model_self_check_agreement = Gauge(
            "detect_model_self_check_agreement",
            "Share of the model version's golden detections reproduced at load (1.0: all of them)",
            ["model", "version"],
            registry=r,
        )

    def track_readiness(self, ready: Callable[[], bool]) -> None:
        """Make ``detect_ready`` answer ``ready()`` at each scrape."""
        self.ready.set_function(lambda: 1.0 if ready() else 0.0)

    def bound_memory(self, budget_bytes: int) -> None:
        """Set the request memory budgets (``body_memory_bytes + image_memory_bytes``) of the bound."""
        self._memory_budgets = budget_bytes
        self.memory_bound.set(self._memory_baseline + self._memory_budgets)

    def measure_memory_baseline(self) -> None:
        """Take the current RSS as the models' baseline (after a model loaded and warmed up)."""
        self._memory_baseline = resident_memory_bytes()
        self.memory_bound.set(self._memory_baseline + self._memory_budgets)

    def serving_info(self, model: str, version: str, backend: str, precision: str) -> None:
        """Record which runtime and inference precision serve ``model``/``version`` (an info gauge)."""
        self.model_info.labels(model=model, version=version, backend=backend, precision=precision).set(1)

    def self_checked(self, model: str, version: str, status: str, agreement: float | None) -> None:
        """Record ``model``/``version``'s self-check (``status`` one of `SELF_CHECK_STATES`)."""
        self.model_self_check.labels(model=model, version=version).state(status)
        if agreement is not None:
            self.model_self_check_agreement.labels(model=model, version=version).set(agreement)
        else:
            with suppress(KeyError):
                self.model_self_check_agreement.remove(model, version)

    def forget_self_check(self, model: str, version: str) -> None:
        """Drop ``model``/``version``'s self-check series (the version is gone)."""
        for metric in (self.model_self_check, self.model_self_check_agreement):
            with suppress(KeyError):
                metric.remove(model, version)

    def for_model(self, model: str, manifest: Manifest | None = None) -> ModelMetrics:
        """Metrics of one model, with its label series created up front so rates start at zero; with
        ``manifest``, its quality metrics count with that version's classes and baseline."""
        if manifest is not None:
            self.quality.track(model, manifest)
        for stage in STAGES:
            self.stages[stage].labels(model=model)
        self.request_seconds.labels(model=model)
        self.batch_size.labels(model=model)
        # Load failures count from 0, so an alert's increase() sees the first one.
        self.model_load_seconds.labels(model=model)
        self.model_load_failures.labels(model=model)
        for reason in CLOSE_REASONS:
            self.batches.labels(model=model, reason=reason)
        self.queue_depth.labels(model=model).set(0)
        return ModelMetrics(self, model)

    def observe_request(self, model: str, status_code: int, seconds: float) -> None:
        series = self._request_series.get((model, status_code))
        if series is None:
            # Model names come from the repository (unknown ones are `NO_MODEL`) and codes from a short
            # list, so this lookup table stays small.
            series = (
                self.requests.labels(model=model, code=str(status_code)),
                self.request_seconds.labels(model=model),
            )
            self._request_series[(model, status_code)] = series
        series[0].inc()
        series[1].observe(seconds)

    def observe_grpc_request(self, model: str, code: str, seconds: float) -> None:
        self.grpc_requests.labels(model=model, code=code).inc()
        self.request_seconds.labels(model=model).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def resident_memory_bytes() -> int:
    """This process's RSS in bytes (0 where /proc is absent), as ``process_resident_memory_bytes``."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def serve_metrics(metrics: ServiceMetrics, host: str, port: int) -> WSGIServer:
    """Serve ``metrics`` on their own port (prometheus-client's server, in a daemon thread); call
    ``shutdown()`` then ``server_close()`` on the result to stop it."""
    server, _ = start_http_server(port, addr=host, registry=metrics.registry)
    return server

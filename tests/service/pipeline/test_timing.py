"""A request's Server-Timing header: per-image stages summed, batch stages the longest image's."""

from __future__ import annotations

from service.pipeline.timing import RequestStages
from service.runtime.batching.batch_worker import ItemTimes
from service.runtime.metrics import ServiceMetrics


def test_stages_in_pipeline_order_in_milliseconds() -> None:
    metrics = ServiceMetrics()
    stages = RequestStages(metrics.for_model("m"))
    stages.stage("postprocess", 0.0005)
    stages.stage("decode", 0.002)
    stages.stage("decode", 0.003)  # a second image
    stages.batched(ItemTimes(queue_wait=0.001, inference=0.040))
    stages.batched(ItemTimes(queue_wait=0.0005, inference=0.030))
    assert stages.server_timing(0.1) == (
        "decode;dur=5.000, queue_wait;dur=1.000, inference;dur=40.000, postprocess;dur=0.500, "
        "total;dur=100.000"
    )
    # Per-image stages also reach the histograms; the batcher observes queue_wait and inference itself.
    assert metrics.registry.get_sample_value("detect_decode_seconds_count", {"model": "m"}) == 2
    assert metrics.registry.get_sample_value("detect_inference_seconds_count", {"model": "m"}) == 0

"""What the load client reads from the server's /metrics: histogram totals, and what they gained over a
measured window (batch sizes, and each stage's time per image, or per batch for inference), and counters
(solo batches)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def histogram_totals(metrics_text: str, model: str | None) -> dict[str, tuple[float, float]]:
    """(sum, count) of ``detect_batch_size`` and of every ``detect_<stage>_seconds`` histogram, for
    ``model`` (None: all models)."""
    # Imported here: the service's metrics module pulls in the runtime, which `detect-bench http --help`
    # does not need (tests/test_console_scripts.py bounds its CPU).
    from service.runtime.metrics import STAGES

    totals: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "detect_batch_size" and not (
            family.name.endswith("_seconds") and family.name.removeprefix("detect_")[:-8] in STAGES
        ):
            continue
        total = count = 0.0
        for sample in family.samples:
            if model is not None and sample.labels.get("model") != model:
                continue
            if sample.name == f"{family.name}_sum":
                total += sample.value
            elif sample.name == f"{family.name}_count":
                count += sample.value
        totals[family.name] = (total, count)
    return totals


def window_gain(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """What each histogram gained between two scrapes."""
    return {
        name: (total - before.get(name, (0.0, 0.0))[0], count - before.get(name, (0.0, 0.0))[1])
        for name, (total, count) in after.items()
    }


def batch_size_counts(metrics_text: str, model: str | None) -> dict[str, float]:
    """How many batches had each size: ``detect_batch_size``'s buckets made non-cumulative, keyed by the
    bucket's upper bound (``"1"``, ``"2"``, ..., ``"+Inf"``), for ``model`` (None: all models)."""
    cumulative: dict[float, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "detect_batch_size":
            continue
        for sample in family.samples:
            if sample.name != "detect_batch_size_bucket":
                continue
            if model is not None and sample.labels.get("model") != model:
                continue
            bound = float(sample.labels["le"])
            cumulative[bound] = cumulative.get(bound, 0.0) + sample.value
    counts: dict[str, float] = {}
    below = 0.0
    for bound in sorted(cumulative):
        counts["+Inf" if bound == float("inf") else f"{bound:g}"] = cumulative[bound] - below
        below = cumulative[bound]
    return counts


def counter_total(metrics_text: str, name: str, model: str | None) -> float:
    """The value of counter ``name`` (as exposed, without ``_total``) for ``model`` (None: all models); 0 when
    the server has no such counter."""
    total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == f"{name}_total" and (model is None or sample.labels.get("model") == model):
                total += sample.value
    return total

"""Expected wait from measured batch times (what admission by expected wait decides on)."""

from __future__ import annotations

import numpy as np
import pytest

from service.runtime.batching.wait_estimate import BatchTimeModel, expected_finish_s, retry_after_s


def test_nothing_observed_predicts_nothing() -> None:
    model = BatchTimeModel()
    assert not model.known and model.seconds(8) == 0.0


def test_one_batch_size_is_proportional_and_two_fit_a_line() -> None:
    model = BatchTimeModel()
    model.observe(4, 0.4)
    assert model.seconds(8) == pytest.approx(0.8)
    for _ in range(5):
        model.observe(1, 0.15)
        model.observe(8, 0.85)
    assert model.seconds(1) == pytest.approx(0.15, abs=0.02)
    assert model.seconds(8) == pytest.approx(0.85, abs=0.02)


def test_the_fit_is_least_squares_over_the_recent_window() -> None:
    rng = np.random.default_rng(0)
    model = BatchTimeModel(history=50)
    sizes = rng.integers(1, 17, size=80)
    times = 0.004 * sizes + 0.002 + rng.normal(0, 0.0005, size=80)
    for size, seconds in zip(sizes, times, strict=True):
        model.observe(int(size), float(seconds))
    a, b = np.polyfit(sizes[-50:].astype(float), times[-50:], 1)  # only the last 50 count
    assert model.seconds(1) == pytest.approx(a + b, rel=1e-9)
    assert model.seconds(16) == pytest.approx(16 * a + b, rel=1e-9)


def test_the_running_sums_stay_the_window_s_fit_over_a_long_run() -> None:
    """The fit is kept from running sums (added and taken off as batches enter and leave the window): after
    thousands of batches, and runs of one size leaving the window, it is still the window's own fit."""
    rng = np.random.default_rng(1)
    model = BatchTimeModel(history=50)
    model.seed({1: 0.01, 8: 0.05})
    sizes = np.concatenate([rng.integers(1, 9, size=3000), np.full(60, 2), rng.integers(1, 9, size=37)])
    times = 0.005 * sizes + 0.003 + rng.normal(0, 0.001, size=len(sizes))
    for size, seconds in zip(sizes, times, strict=True):
        model.observe(int(size), float(seconds))
    a, b = np.polyfit(sizes[-50:].astype(float), times[-50:], 1)
    assert model.seconds(1) == pytest.approx(a + b, rel=1e-9)
    assert model.seconds(8) == pytest.approx(8 * a + b, rel=1e-9)


def test_only_one_size_served_keeps_the_seeds_of_the_others_in_the_fit() -> None:
    model = BatchTimeModel(history=4)
    model.seed({1: 0.01, 8: 0.05})
    for _ in range(10):
        model.observe(8, 0.06)  # size 1 never served: its seed stays in the fit, beside the served 8s
    a, b = np.polyfit([1.0, 8, 8, 8, 8], [0.01, 0.06, 0.06, 0.06, 0.06], 1)
    assert model.fitted
    assert model.seconds(1) == pytest.approx(a + b, rel=1e-9)


def test_expected_finish_counts_the_running_batch_and_full_batches_ahead() -> None:
    model = BatchTimeModel()
    model.observe(8, 0.8)  # 0.1 s per image
    # 0.3 s left of a running batch of 8; 20 queued: two full batches, then ours with 4 + 1 images.
    finish = expected_finish_s(
        model, queued=20, images=1, max_batch_size=8, running_size=8, running_for_s=0.5
    )
    assert finish == pytest.approx(0.3 + 2 * 0.8 + 0.5)
    idle = expected_finish_s(model, queued=0, images=3, max_batch_size=8, running_size=0, running_for_s=0)
    assert idle == pytest.approx(0.3)
    # Two workers: the two full batches ahead run side by side, in one round.
    pooled = expected_finish_s(
        model, queued=20, images=1, max_batch_size=8, running_size=8, running_for_s=0.5, workers=2
    )
    assert pooled == pytest.approx(0.3 + 1 * 0.8 + 0.5)


def test_retry_after_is_when_the_excess_has_drained() -> None:
    assert retry_after_s(14.2, 10.0) == 5
    assert retry_after_s(3.0, 10.0) == 1


def test_fitted_once_two_batch_sizes_were_seen() -> None:
    model = BatchTimeModel()
    model.observe(1, 0.1)
    model.observe(1, 0.12)
    assert model.known and not model.fitted  # proportional: the per-batch cost is assumed 0
    model.observe(4, 0.3)
    assert model.fitted


def test_size_seconds_is_what_each_size_measured_lately() -> None:
    model = BatchTimeModel()
    for _ in range(20):
        model.observe(1, 0.008)  # a graph compiled for batch 1
        model.observe(2, 0.018)  # the dynamic graph: two cost more than two of one
        model.observe(8, 0.055)
    assert model.size_seconds(1) == pytest.approx(0.008)
    assert model.size_seconds(2) == pytest.approx(0.018)
    assert model.size_seconds(8) == pytest.approx(0.055)
    assert model.size_seconds(4) == pytest.approx(model.seconds(4))  # not run yet: the linear fit
    model.observe(4, 0.001)
    assert model.size_seconds(4) == pytest.approx(model.seconds(4))  # run once: still the fit
    for _ in range(30):
        model.observe(2, 0.012)  # the average follows the recent batches of that size
    assert model.size_seconds(2) == pytest.approx(0.012, rel=0.01)


def test_a_seed_stands_for_its_size_until_that_size_has_served_batches_of_its_own() -> None:
    model = BatchTimeModel(history=4)
    model.seed({1: 0.010, 8: 0.045})  # the warmup's timed batches: 5 ms per image, 5 ms per batch
    assert model.known and model.fitted
    assert model.seconds(4) == pytest.approx(0.025)
    assert model.measured(1) and model.measured(8) and not model.measured(4)
    assert model.size_seconds(8) == pytest.approx(0.045)  # the warmup's time, not the fit's
    model.observe(1, 0.020)  # a served single request: it replaces the seed of its size in the fit
    assert model.seconds(1) == pytest.approx(0.020)  # the line through it and the full batch's seed
    assert model.size_seconds(1) == pytest.approx(0.010)  # run once: the seed still stands for it
    for _ in range(10):
        model.observe(1, 0.012)  # served single requests only, more than the history holds
    assert model.fitted  # the seed of a full batch keeps the per-batch cost known
    assert model.size_seconds(1) == pytest.approx(0.0129, rel=0.01)  # served: its moving average
    assert model.size_seconds(8) == pytest.approx(0.045)
    for _ in range(3):
        model.observe(8, 0.090)  # served full batches cost more than the warmup's
    assert model.size_seconds(8) == pytest.approx(0.090)

"""The ``latency`` batching policy's close decision (`service.runtime.batching.batch_close`), as a pure
function."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest

from service.runtime.batching.batch_close import (
    ArrivalRate,
    BatchState,
    HeldUp,
    close_reason,
    keep_up_size,
    solo_pays,
    wait_s,
    worth_waiting,
)


def linear(per_image_ms: float, fixed_ms: float) -> Callable[[int], float]:
    return lambda n: (per_image_ms * n + fixed_ms) / 1000


def state(**overrides: object) -> BatchState:
    base = BatchState(
        size=1,
        max_batch_size=8,
        now=10.0,
        oldest_budget_end=10.1,
        earliest_start_by=math.inf,
        worker_idle=True,
        worker_remaining_s=0.0,
        arrival_rate=0.0,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def test_full_and_deadline_close_whatever_else_holds() -> None:
    model = linear(1, 20)
    assert close_reason(state(size=8, worker_idle=False), model) == "full"
    assert close_reason(state(earliest_start_by=10.0, worker_idle=False), model) == "deadline"
    assert close_reason(state(earliest_start_by=10.0), None) == "deadline"


def test_without_a_fitted_model_an_idle_worker_takes_the_batch() -> None:
    assert close_reason(state(), None) == "idle"
    assert close_reason(state(worker_idle=False), None) is None


def test_a_batch_stops_growing_when_one_more_would_keep_its_oldest_past_budget() -> None:
    model = linear(10, 3)  # t(2) = 23 ms, t(3) = 33 ms
    busy = state(worker_idle=False, worker_remaining_s=0.050, oldest_budget_end=10.080)
    assert close_reason(replace(busy, size=1), model) is None  # 50 + 23 = 73 ms <= 80: keep filling
    assert close_reason(replace(busy, size=2), model) == "budget"  # 50 + 33 = 83 ms > 80
    # Requests that already waited get shorter batches: the same batch a little later closes at 1.
    assert close_reason(replace(busy, size=1, now=10.010), model) == "budget"


def test_the_budget_rule_waits_for_a_fit_over_two_batch_sizes() -> None:
    busy = state(size=2, worker_idle=False, worker_remaining_s=0.050, oldest_budget_end=10.080)
    assert close_reason(busy, linear(10, 3)) == "budget"
    assert close_reason(busy, linear(10, 3), fitted=False) is None  # keeps growing while busy


def test_a_lost_budget_is_not_defended() -> None:
    model = linear(10, 3)
    # Behind 80 ms of running batch even this batch of 2 (23 ms) misses the oldest's budget: capping it
    # would only cost throughput, so it keeps growing while the worker is busy.
    lost = state(size=2, worker_idle=False, worker_remaining_s=0.080, oldest_budget_end=10.080)
    assert close_reason(lost, model) is None


def test_batches_are_not_capped_below_what_the_arrival_rate_needs() -> None:
    model = linear(10, 30)  # 1 image: 25/s, 4: 57/s, 8: 73/s
    assert keep_up_size(20, 8, model) == 1 and keep_up_size(50, 8, model) == 3
    assert keep_up_size(1000, 8, model) == 8  # none keeps up: the most throughput
    assert keep_up_size(1000, 8, linear(10, 0)) == 1  # no fixed cost: size does not matter
    busy = state(size=2, worker_idle=False, worker_remaining_s=0.0, oldest_budget_end=10.055)
    assert close_reason(replace(busy, arrival_rate=20), model) == "budget"  # t(2) 50 ms fits 55, t(3) 60 not
    assert close_reason(replace(busy, arrival_rate=50), model) is None  # 2 images cannot keep up: grow


def test_an_idle_worker_waits_for_company_only_where_that_lowers_the_summed_latency() -> None:
    heavy_fixed = linear(1, 20)  # batching pays: a second image costs 1 ms, a second batch 21 ms
    assert close_reason(state(arrival_rate=500), heavy_fixed) is None  # the next one is ~2 ms away
    assert close_reason(state(arrival_rate=20), heavy_fixed) == "idle"  # 50 ms away: not worth it
    assert close_reason(state(arrival_rate=0), heavy_fixed) == "idle"  # nothing is arriving
    # Waiting would run past the oldest request's budget: go now.
    assert close_reason(state(arrival_rate=500, oldest_budget_end=10.023), heavy_fixed) == "idle"
    # One more would miss the budget (22 > 21.5 ms) where one alone keeps it and keeps up with 20/s.
    assert close_reason(state(arrival_rate=20, oldest_budget_end=10.0215), heavy_fixed) == "budget"


def test_with_a_small_fixed_cost_an_idle_worker_never_waits() -> None:
    # EfficientDet-D0 INT8 on 2 cores: ~8 ms per image plus ~3 ms per batch. Even with the next request
    # due at once, one now and one after it (11 + 22 ms) beat two together (2 x 19 ms).
    effdet = linear(8.1, 3.2)
    for rate in (10.0, 100.0, 1e6):
        assert close_reason(state(arrival_rate=rate, oldest_budget_end=11.0), effdet) == "idle"
    assert not worth_waiting(1, 0.0, effdet) and worth_waiting(1, 0.0, linear(1, 20))
    assert not worth_waiting(3, math.inf, linear(1, 20))


def test_wait_is_bounded_by_the_next_arrival_and_the_budget() -> None:
    assert wait_s(state(arrival_rate=500)) == pytest.approx(0.002)
    assert wait_s(state(arrival_rate=5)) == pytest.approx(0.1)  # the budget ends first
    assert wait_s(state(arrival_rate=5, earliest_start_by=10.03)) == pytest.approx(0.03)
    assert wait_s(state(now=10.2)) is None  # nothing ahead: wait for the next request or batch
    # A busy worker with the budget already lost: no timer at all (a zero wait would spin the loop); the
    # finished batch wakes the batcher.
    assert wait_s(state(now=10.2, worker_idle=False, arrival_rate=500)) is None
    assert wait_s(state(worker_idle=False, arrival_rate=500)) == pytest.approx(0.1)


def test_the_arrival_rate_follows_the_gaps_and_decays_in_silence() -> None:
    rate = ArrivalRate()
    assert rate.rate(0.0) == 0.0
    for i in range(100):
        rate.arrived(i * 0.01)
    assert rate.rate(0.99) == pytest.approx(100, rel=0.01)
    assert rate.rate(2.0) < 20  # a second of silence


def test_pool_share_splits_when_the_other_worker_frees_soon() -> None:
    from service.runtime.batching.batch_close import pool_share

    def single_thread(n: int) -> float:  # a stream on one thread: little fixed cost per batch
        return 0.017 * n + 0.001

    assert pool_share(0, single_thread, 0.0) == 0
    assert pool_share(1, single_thread, 0.0) == 1
    # The other worker is free as well: half each.
    assert pool_share(2, single_thread, 0.0) == 1
    assert pool_share(8, single_thread, 0.0) == 4
    # It frees in 10 ms: this one takes a little more than half.
    assert pool_share(8, single_thread, 0.010) == 4
    assert pool_share(8, single_thread, 0.040) == 5
    # It frees only much later: one now, the next on this worker after it (a batch of two would make
    # the first wait for the second).
    assert pool_share(2, single_thread, 0.5) == 1
    # ... unless the arrivals need batches of two to be kept up with (one image: 55.6/s per worker).
    assert pool_share(2, single_thread, 0.5, rate_per_worker=57.0, max_batch_size=8) == 2
    assert pool_share(2, single_thread, 0.5, rate_per_worker=20.0, max_batch_size=8) == 1

    def large_fixed_cost(n: int) -> float:  # a batch costs much more than its images
        return 0.002 * n + 0.050

    assert pool_share(4, large_fixed_cost, 0.0) == 2  # both free: side by side still wins
    assert pool_share(4, large_fixed_cost, 0.030) == 4  # a second batch would pay the fixed cost late


def test_pool_share_with_the_gain_margin_takes_only_sizes_that_beat_single_requests() -> None:
    from service.runtime.batching.batch_close import pool_share

    def no_gain(n: int) -> float:  # a batch costs what its images cost one by one, and a little more
        return 0.0105 * n

    def half_price_at_four(n: int) -> float:  # only a batch of four or more pays
        return 0.010 if n == 1 else 0.011 * n if n < 4 else 0.006 * n

    # Without the margin the two free workers split the queue; with it, one request per free worker.
    assert pool_share(8, no_gain, 0.0) == 4
    assert pool_share(8, no_gain, 0.0, gain_margin=True) == 1
    # Arrivals that single requests cannot keep up with: still no batch that does not pay.
    assert pool_share(8, no_gain, 0.0, rate_per_worker=500.0, max_batch_size=8, gain_margin=True) == 1
    # A size that pays is used: half each on two free workers (four pays, by half).
    assert pool_share(8, half_price_at_four, 0.0, gain_margin=True) == 4
    # Three waiting: no size among them pays, so one, whatever the arrivals need.
    assert (
        pool_share(3, half_price_at_four, 0.0, rate_per_worker=500.0, max_batch_size=8, gain_margin=True) == 1
    )
    # The keep-up floor is a size that pays: 150/s per worker needs batches of four (one serves 100/s).
    assert (
        pool_share(6, half_price_at_four, 0.5, rate_per_worker=150.0, max_batch_size=8, gain_margin=True) == 4
    )


def test_dispatch_size_runs_one_by_one_until_arrivals_outpace_single_requests() -> None:
    from service.runtime.batching.batch_close import BATCH_GAIN_MARGIN, KEEP_UP_HEADROOM, dispatch_size

    # EfficientDet-D0 INT8 on OpenVINO: batch 1 on its static graph, the others on the dynamic one.
    measured = {1: 0.0084, 2: 0.0176, 3: 0.0240, 4: 0.0300, 8: 0.0551}

    def times(n: int) -> float:
        return measured.get(n, 0.0084 * n * 0.95)

    # Two waiting: a batch of two costs more than two of one, so one now, the other right after.
    assert dispatch_size(2, times, rate=20.0, max_batch_size=8) == 1
    assert dispatch_size(1, times, rate=20.0, max_batch_size=8) == 1
    # Arrivals near what single requests can serve (1 / 8.4 ms = 119/s, less the headroom): of the sizes
    # waiting, the one that serves the most per second.
    rate = 105.0
    assert 1 / times(1) < rate * KEEP_UP_HEADROOM
    assert dispatch_size(8, times, rate=rate, max_batch_size=8) == 8  # 145/s
    assert dispatch_size(4, times, rate=rate, max_batch_size=8) == 4  # 133/s
    assert dispatch_size(2, times, rate=rate, max_batch_size=8) == 1  # a batch of two serves fewer: 114/s
    # A batch of three serves 125/s, 5% more than single requests: below BATCH_GAIN_MARGIN, not worth it.
    assert BATCH_GAIN_MARGIN > 0.05
    assert dispatch_size(3, times, rate=rate, max_batch_size=8) == 1
    # A size that costs more than the next one (noise, or a shape without its own graph) is passed over.
    bumpy = {1: 0.0097, 2: 0.0257, 3: 0.0397, 4: 0.0362, 8: 0.0548}
    assert dispatch_size(3, lambda n: bumpy.get(n, 0.007 * n), rate=rate, max_batch_size=8) == 1
    assert dispatch_size(4, lambda n: bumpy.get(n, 0.007 * n), rate=rate, max_batch_size=8) == 1  # 7% gain
    assert dispatch_size(8, lambda n: bumpy.get(n, 0.007 * n), rate=rate, max_batch_size=8) == 8


def test_while_single_requests_keep_up_only_a_size_measured_to_pay_is_used() -> None:
    from service.runtime.batching.batch_close import dispatch_size, pool_share

    gpu_like = linear(1, 20)  # the fit: every batch pays
    only_one_ran = {1}.__contains__
    # Low load: the fit's promise is not taken on trust; a size that ran and paid is.
    assert dispatch_size(8, gpu_like, rate=1.0, max_batch_size=16, measured=only_one_ran) == 1
    assert dispatch_size(8, gpu_like, rate=1.0, max_batch_size=16, measured={1, 8}.__contains__) == 8
    assert pool_share(2, gpu_like, 0.5, rate_per_worker=1.0, gain_margin=True, measured=only_one_ran) == 1
    # Arrivals beyond what single requests serve (1 / 21 ms = 48/s) and seven waiting: still measured sizes
    # only (a burst of random arrivals looks like that for a moment).
    assert dispatch_size(7, gpu_like, rate=60.0, max_batch_size=8, measured=only_one_ran) == 1
    assert (
        pool_share(
            7, gpu_like, 0.5, rate_per_worker=75.0, max_batch_size=8, gain_margin=True, measured=only_one_ran
        )
        == 1
    )
    # A full batch waiting at a rate single requests serve (a burst): measured sizes only.
    assert dispatch_size(8, gpu_like, rate=40.0, max_batch_size=8, measured=only_one_ran) == 1
    assert (
        pool_share(
            8, gpu_like, 0.5, rate_per_worker=50.0, max_batch_size=8, gain_margin=True, measured=only_one_ran
        )
        == 1
    )
    # A full batch waiting and the rate beyond single requests: they have fallen behind, sizes not yet run
    # are tried.
    assert dispatch_size(8, gpu_like, rate=60.0, max_batch_size=8, measured=only_one_ran) == 8
    share = pool_share(
        8, gpu_like, 0.5, rate_per_worker=75.0, max_batch_size=8, gain_margin=True, measured=only_one_ran
    )
    assert share == 8


def test_dispatch_size_batches_at_once_where_a_batch_has_a_large_fixed_cost() -> None:
    from service.runtime.batching.batch_close import dispatch_size

    gpu_like = linear(1, 20)  # 20 ms per batch, 1 ms per image
    assert dispatch_size(2, gpu_like, rate=1.0, max_batch_size=8) == 2
    assert dispatch_size(8, gpu_like, rate=1.0, max_batch_size=8) == 8
    per_image_only = linear(10, 0)
    assert dispatch_size(8, per_image_only, rate=1.0, max_batch_size=8) == 1


def test_batches_longer_than_the_bound_wait_until_the_shorter_ones_fall_behind() -> None:
    from service.runtime.batching.batch_close import BOUNDED_HEADROOM, dispatch_size, pool_share

    # Static graphs for 1 and 2 (a pair pays 15%), the dynamic one for the rest (a full batch pays 18%).
    measured = {1: 0.0084, 2: 0.0143, 8: 0.0551}

    def times(n: int) -> float:
        return measured.get(n, 0.0177 + (n - 2) * 0.00623)

    pairs_serve = 2 / times(2)  # 140/s
    rate = 105.0  # beyond what single requests serve with the headroom, within what pairs serve
    assert rate * BOUNDED_HEADROOM <= pairs_serve
    assert dispatch_size(8, times, rate=rate, max_batch_size=8) == 8  # no bound: the most per second
    assert dispatch_size(8, times, rate=rate, max_batch_size=8, longest_s=0.025) == 2
    assert dispatch_size(8, times, rate=rate, max_batch_size=8, longest_s=0.060) == 8  # 8 is within it
    # Arrivals the pairs serve only without headroom: the queue would grow behind them; 8 at once.
    busy = 125.0
    assert busy <= pairs_serve < busy * BOUNDED_HEADROOM
    assert dispatch_size(8, times, rate=busy, max_batch_size=8, longest_s=0.025) == 8
    # Several workers: the same bound on each one's share of the arrivals (headroom included in the rate).
    assert pool_share(8, times, 0.0, rate_per_worker=50.0, max_batch_size=8, gain_margin=True) == 4
    share = pool_share(
        8, times, 0.0, rate_per_worker=50.0, max_batch_size=8, gain_margin=True, longest_s=0.025
    )
    assert share == 2


def test_on_a_pool_the_bound_keeps_batches_short_at_any_load() -> None:
    from service.runtime.batching.batch_close import KEEP_UP_HEADROOM, pool_share

    def stream(n: int) -> float:  # one core per stream: 19 ms a request, a batch pays 12%
        return 0.019 if n == 1 else 0.019 * n * 0.88

    singles_serve = 1 / stream(1)  # 52.6/s per stream
    per_worker = 50.0  # each stream's share of the arrivals
    assert per_worker * KEEP_UP_HEADROOM > singles_serve >= per_worker

    def share(rate: float, longest_s: float = math.inf, waiting: int = 2) -> int:  # both streams free
        return pool_share(
            waiting,
            stream,
            0.0,
            rate_per_worker=rate * KEEP_UP_HEADROOM,
            max_batch_size=8,
            gain_margin=True,
            longest_s=longest_s,
        )

    # Without the bound the keep-up floor (with its 25% headroom) makes a pair of the two waiting.
    assert share(per_worker) == 2
    # A pair takes 33 ms, past the bound: single requests, which serve each stream's share of the rate.
    assert share(per_worker, longest_s=0.025) == 1
    # Arrivals beyond what single requests serve, but no full batch waiting (a burst of random arrivals
    # lifts the rate estimate for a moment): still single requests.
    assert share(55.0, longest_s=0.025) == 1
    assert share(55.0, longest_s=0.025, waiting=7) == 1
    # Nor when they have fallen behind by both signals: a pool's bound never gives way.
    assert share(55.0, longest_s=0.025, waiting=8) == 1
    assert share(55.0, waiting=8) > 1  # without it, a batch


@pytest.mark.parametrize(
    ("stream_lone", "solo_lone", "solo_now", "rate", "held_share", "pays"),
    [
        (0.017, 0.010, 0.010, 10.0, 1.0, True),  # saves 7 ms; ~0.1 requests held up, losing 10 ms each
        (0.017, 0.010, 0.010, 69.0, 1.0, True),  # just below where the held-up requests lose 7 ms
        (0.017, 0.010, 0.010, 71.0, 1.0, False),
        # Decoding on the inference thread doubles the solo batch's time; the saving stays 7 ms.
        (0.017, 0.010, 0.020, 15.0, 1.0, True),
        (0.017, 0.010, 0.020, 20.0, 1.0, False),
        (0.017, 0.010, 0.010, 1000.0, 0.0, True),  # clients that wait for their answers: none held up
        (0.017, 0.010, 0.010, 100.0, 0.5, True),
        (0.010, 0.012, 0.012, 0.0, 0.0, False),  # a solo graph slower than one stream never pays
        (0.017, 0.0, 0.010, 0.0, 0.0, False),  # no warmup time for the solo graph
    ],
)
def test_the_solo_graph_pays_while_the_requests_it_holds_up_lose_less_than_it_saves(
    stream_lone: float, solo_lone: float, solo_now: float, rate: float, held_share: float, pays: bool
) -> None:
    assert solo_pays(stream_lone, solo_lone, solo_now, rate, held_share) is pays


def test_held_up_is_the_share_of_due_arrivals_that_came() -> None:
    held = HeldUp(smoothing=1)  # no smoothing: the last run alone
    assert held.share == 1.0  # nothing measured: as random arrivals
    held.ran(arrived=0, expected=0.8)  # a client that waits for each answer
    assert held.share == 0.0
    held.ran(arrived=2, expected=1.0)
    assert held.share == 2.0
    smoothed = HeldUp()
    for _ in range(40):
        smoothed.ran(arrived=0, expected=0.5)
    smoothed.ran(arrived=1, expected=0.5)  # one burst moves it a little
    assert 0.1 < smoothed.share < 0.3

import pytest

from bench.model.queue_model import BatchCost, highest_rate, simulate


def test_batch_cost_is_the_line_through_the_batch_times():
    # 50 img/s with batches of 1: 20 ms; 80 img/s with batches of 8: 100 ms -> 20 = a + b, 100 = a + 8 b.
    cost = BatchCost.from_throughput({1: 50.0, 8: 80.0})
    assert cost.per_request_ms == pytest.approx(80 / 7)
    assert cost.fixed_ms == pytest.approx(20 - 80 / 7)
    assert cost.ms(8) == pytest.approx(100.0)


def test_batch_cost_needs_two_batch_sizes_and_positive_rates():
    with pytest.raises(ValueError, match="two or more"):
        BatchCost.from_throughput({8: 80.0})
    with pytest.raises(ValueError, match="two or more"):
        BatchCost.from_throughput({1: 50.0, 8: 0.0})


def test_without_batching_the_mean_latency_is_the_m_d_1_queue_s():
    # Pollaczek-Khinchine for a deterministic 10 ms service at 50 req/s (load 0.5): mean wait
    # rho * S / (2 (1 - rho)) = 5 ms, so a mean latency of 15 ms.
    predicted = simulate(50.0, BatchCost(0.0, 10.0), max_batch=1, requests=200_000)
    assert predicted.mean_ms == pytest.approx(15.0, rel=0.03)
    assert predicted.mean_batch == 1.0


def test_a_lone_request_at_low_load_takes_one_batch_of_one():
    predicted = simulate(0.5, BatchCost(3.0, 7.0), requests=2_000)
    assert predicted.p50_ms == pytest.approx(10.0)
    assert predicted.mean_batch == pytest.approx(1.0, abs=0.01)


def test_batching_serves_a_rate_that_single_requests_cannot():
    cost = BatchCost(6.0, 4.0)  # one at a time: 100 req/s at most; batches of 8: 842 img/s
    alone = simulate(150.0, cost, max_batch=1, requests=20_000)
    batched = simulate(150.0, cost, max_batch=8, requests=20_000)
    assert alone.p99_ms > 10_000  # the queue grows for the whole run
    assert batched.p99_ms < 100
    assert 1.5 < batched.mean_batch < 8


def test_the_highest_rate_keeps_its_p99_within_the_bound_and_falls_as_costs_rise():
    cheap, dear = BatchCost(1.7, 9.5), BatchCost(4.2, 10.3)
    cheap_rate = highest_rate(cheap, 100.0, requests=20_000)
    dear_rate = highest_rate(dear, 100.0, requests=20_000)
    assert simulate(cheap_rate, cheap, requests=20_000).p99_ms <= 100.0
    assert simulate(cheap_rate * 1.05, cheap, requests=20_000).p99_ms > 100.0
    assert 0 < dear_rate < cheap_rate
    assert highest_rate(BatchCost(60.0, 50.0), 100.0) == 0.0  # one request alone takes 110 ms


def test_size_costs_interpolate_and_a_dispatch_rule_sets_the_batches() -> None:
    from bench.model.queue_model import DISPATCH, SizeCosts

    cost = SizeCosts({1: 8.0, 2: 18.0, 8: 54.0})
    assert [cost.ms(n) for n in (1, 2, 5, 8, 9)] == [8.0, 18.0, 36.0, 54.0, 60.0]
    with pytest.raises(ValueError, match="batch 1"):
        SizeCosts({2: 10.0, 8: 30.0})
    one_by_one = simulate(60.0, cost, dispatch=DISPATCH["none"](cost, 8), requests=3000)
    everything = simulate(60.0, cost, dispatch=DISPATCH["fixed"](cost, 8), requests=3000)
    adaptive = simulate(60.0, cost, dispatch=DISPATCH["adaptive"](cost, 8), requests=3000)
    assert one_by_one.mean_batch == 1.0 and everything.mean_batch > 1.0
    assert adaptive.mean_batch == 1.0  # well below what single requests serve (125/s): one at a time
    assert adaptive.p99_ms == one_by_one.p99_ms < everything.p99_ms

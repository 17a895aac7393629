"""DynamicBatcher: batch closing rules, overlap, overload, deadlines, failures, cancellation, shutdown.

Each test runs its own event loop (``asyncio.run``). Inference runs in the batcher's worker thread,
so tests pace it with threading events instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from service.errors import BackendError, DeadlineExceeded, QueueFull, ServiceUnavailable
from service.runtime.batching.batch_worker import ItemTimes
from service.runtime.batching.batcher import DynamicBatcher

WAIT = 10.0  # generous upper bound for any event a test waits on; reaching it means the test failed


def run(coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro_fn())


class RecordingMetrics:
    def __init__(self) -> None:
        self.batches: list[tuple[int, str]] = []
        self.waits: list[float] = []
        self.depths: list[int] = []
        self.inferences: list[float] = []
        self.solo_batches = 0

    def batch_closed(self, size: int, reason: str) -> None:
        self.batches.append((size, reason))

    def queue_wait(self, seconds: float) -> None:
        self.waits.append(seconds)

    def queue_depth(self, depth: int) -> None:
        self.depths.append(depth)

    def inference(self, seconds: float) -> None:
        self.inferences.append(seconds)

    def solo_batch(self) -> None:
        self.solo_batches += 1


class Worker:
    """A batch function that doubles its inputs, records each batch, and can be held at a gate."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.fail_on: int | None = None

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.entered.set()
        assert self.gate.wait(WAIT)
        if self.fail_on is not None and self.fail_on in items:
            raise RuntimeError(f"cannot process {self.fail_on}")
        return [2 * item for item in items]

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, WAIT), "the batch never started"
        self.entered.clear()

    @property
    def seen(self) -> list[int]:
        return [item for batch in self.batches for item in batch]


def make(worker: Worker, metrics: RecordingMetrics | None = None, **kwargs: Any) -> DynamicBatcher[int, int]:
    config: dict[str, Any] = {"max_batch_size": 4, "max_queue_delay_s": 0.005, "max_queue_size": 16}
    config.update(kwargs)
    batcher: DynamicBatcher[int, int] = DynamicBatcher("test", worker, metrics=metrics, **config)
    batcher.start()
    return batcher


async def until(predicate: Callable[[], bool]) -> None:
    """Yield to the loop until ``predicate`` holds (state changes happen in loop callbacks, not in time)."""
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0)


def test_batch_closes_at_max_size_without_waiting_for_the_delay() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=4, max_queue_delay_s=30.0)
        started = time.monotonic()
        results = await asyncio.gather(*(batcher.submit(i) for i in range(4)))
        assert time.monotonic() - started < 5.0  # far below the 30 s delay
        assert results == [0, 2, 4, 6]
        assert worker.batches == [[0, 1, 2, 3]]
        assert metrics.batches == [(4, "full")]
        await batcher.stop()

    run(scenario)


def test_batch_closes_at_delay_after_the_first_request() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=8, max_queue_delay_s=0.05)
        started = time.monotonic()
        assert await batcher.submit(21) == 42
        assert time.monotonic() - started >= 0.05
        assert worker.batches == [[21]]
        assert metrics.batches == [(1, "delay")]
        assert len(metrics.waits) == 1 and metrics.waits[0] >= 0.05
        await batcher.stop()

    run(scenario)


def test_a_request_learns_its_own_queue_wait_and_inference_time() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=8, max_queue_delay_s=0.05)
        times = ItemTimes()
        assert await batcher.submit(21, times=times) == 42
        assert (times.queue_wait, times.inference) == (metrics.waits[0], metrics.inferences[0])
        assert times.queue_wait >= 0.05 and times.batch_started is not None
        assert times.batch_span is None  # tracing off
        await batcher.stop()

    run(scenario)


def test_each_request_gets_its_own_output() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=3, max_queue_delay_s=0.001)
        results = await asyncio.gather(*(batcher.submit(i) for i in range(10)))
        assert results == [2 * i for i in range(10)]
        assert max(len(b) for b in worker.batches) <= 3
        await batcher.stop()

    run(scenario)


def test_next_batch_forms_while_one_runs() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=4, max_queue_delay_s=0.0)
        worker.gate.clear()
        first = asyncio.ensure_future(batcher.submit(1))
        await worker.wait_entered()
        # The worker is busy: these three queue up and form the next batch meanwhile.
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3, 4)]
        await until(lambda: batcher.queue_depth == 3)
        assert worker.batches == [[1]]
        worker.gate.set()
        assert await first == 2
        assert await asyncio.gather(*rest) == [4, 6, 8]
        assert worker.batches == [[1], [2, 3, 4]]
        assert [size for size, _ in metrics.batches] == [1, 3]
        await batcher.stop()

    run(scenario)


def test_queue_overflow_raises_queue_full_with_retry_after() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=1, max_queue_delay_s=0.0, max_queue_size=2)
        worker.gate.clear()
        running = asyncio.ensure_future(batcher.submit(0))
        await worker.wait_entered()
        queued = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
        await until(lambda: batcher.queue_depth == 2)
        with pytest.raises(QueueFull) as excinfo:
            await batcher.submit(3)
        assert excinfo.value.status_code == 429
        assert excinfo.value.retry_after_s is not None and excinfo.value.retry_after_s >= 1
        assert "max_queue_size 2" in excinfo.value.message
        worker.gate.set()
        assert await running == 0
        assert await asyncio.gather(*queued) == [2, 4]
        assert 3 not in worker.seen
        await batcher.stop()

    run(scenario)


def test_expired_request_gets_504_and_is_never_computed() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=4, max_queue_delay_s=0.0)
        worker.gate.clear()
        running = asyncio.ensure_future(batcher.submit(1))
        await worker.wait_entered()
        late = asyncio.ensure_future(batcher.submit(99, deadline=time.monotonic() + 0.05))
        on_time = asyncio.ensure_future(batcher.submit(3))
        with pytest.raises(DeadlineExceeded) as excinfo:
            await late
        assert excinfo.value.status_code == 504
        worker.gate.set()
        assert await running == 2
        assert await on_time == 6
        assert 99 not in worker.seen
        await batcher.stop()

    run(scenario)


def test_deadline_closes_a_batch_early_so_the_request_can_start() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        # A wide margin keeps the test independent of scheduling jitter on a busy machine.
        batcher = make(worker, metrics, max_batch_size=8, max_queue_delay_s=30.0, deadline_margin_s=0.2)
        assert await batcher.submit(5, deadline=time.monotonic() + 0.4) == 10
        assert metrics.batches == [(1, "deadline")]
        await batcher.stop()

    run(scenario)


def test_backend_failure_fails_only_that_batch() -> None:
    async def scenario() -> None:
        worker = Worker()
        worker.fail_on = 13
        batcher = make(worker, max_batch_size=2, max_queue_delay_s=30.0)
        failing = [asyncio.ensure_future(batcher.submit(i)) for i in (13, 14)]
        results = await asyncio.gather(*failing, return_exceptions=True)
        assert all(isinstance(r, BackendError) for r in results)
        assert all("cannot process 13" in r.message for r in results if isinstance(r, BackendError))
        assert all(r.status_code == 500 for r in results if isinstance(r, BackendError))
        # The batcher keeps serving.
        assert await asyncio.gather(batcher.submit(1), batcher.submit(2)) == [2, 4]
        assert batcher.alive
        await batcher.stop()

    run(scenario)


def test_output_count_mismatch_fails_the_batch() -> None:
    async def scenario() -> None:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            "short", lambda items: items[:-1], max_batch_size=2, max_queue_delay_s=30.0, max_queue_size=4
        )
        batcher.start()
        results = await asyncio.gather(batcher.submit(1), batcher.submit(2), return_exceptions=True)
        assert all(isinstance(r, BackendError) and "1 results for 2 inputs" in r.message for r in results)
        await batcher.stop()

    run(scenario)


def test_cancelled_requests_are_skipped_before_compute() -> None:
    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, max_batch_size=4, max_queue_delay_s=0.0)
        worker.gate.clear()
        running = asyncio.ensure_future(batcher.submit(1))
        await worker.wait_entered()
        gone = asyncio.ensure_future(batcher.submit(77))  # e.g. its client disconnected
        kept = asyncio.ensure_future(batcher.submit(3))
        await until(lambda: batcher.queue_depth == 2)
        gone.cancel()
        worker.gate.set()
        assert await running == 2
        assert await kept == 6
        assert gone.cancelled()
        assert 77 not in worker.seen
        await batcher.stop()

    run(scenario)


def test_stop_runs_queued_work_then_refuses_new_requests() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=8, max_queue_delay_s=30.0)
        pending = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        await until(lambda: batcher.queue_depth == 3)
        started = time.monotonic()
        await batcher.stop(timeout=WAIT)
        assert time.monotonic() - started < 5.0  # did not wait for the 30 s delay
        assert await asyncio.gather(*pending) == [0, 2, 4]
        assert metrics.batches == [(3, "drain")]
        with pytest.raises(ServiceUnavailable):
            await batcher.submit(1)
        assert not batcher.alive

    run(scenario)


def test_a_dead_loop_is_logged_fails_waiters_and_turns_not_alive(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenMetrics(RecordingMetrics):
        def batch_closed(self, size: int, reason: str) -> None:
            raise RuntimeError("metrics backend exploded")

    async def scenario() -> None:
        worker = Worker()
        batcher = make(worker, BrokenMetrics(), max_batch_size=1, max_queue_delay_s=0.0)
        assert batcher.alive
        with pytest.raises(ServiceUnavailable, match="metrics backend exploded"):
            await batcher.submit(1)
        assert not batcher.alive
        assert isinstance(batcher.failure, RuntimeError)
        with pytest.raises(ServiceUnavailable, match="not serving"):
            await batcher.submit(2)
        assert worker.seen == []
        await batcher.stop()

    with caplog.at_level(logging.ERROR, logger="service.runtime.batching.batcher"):
        run(scenario)
    assert any("batcher 'test' died" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size must be an integer >= 1, got 0"),
        ({"max_queue_delay_s": -1.0}, "max_queue_delay_s must be >= 0, got -1.0"),
        ({"max_queue_size": 0}, "max_queue_size must be an integer >= 1, got 0"),
    ],
)
def test_arguments_are_validated_eagerly(kwargs: dict[str, Any], message: str) -> None:
    config: dict[str, Any] = {"max_batch_size": 2, "max_queue_delay_s": 0.0, "max_queue_size": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        DynamicBatcher("bad", lambda items: items, **config)


def test_idle_dispatch_starts_a_lone_request_at_once_and_batches_while_busy() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=8, max_queue_delay_s=30.0, dispatch_when_idle=True)
        started = time.monotonic()
        assert await batcher.submit(1) == 2  # the worker was idle: no 30 s wait for company
        assert time.monotonic() - started < 5.0
        worker.gate.clear()
        first = asyncio.ensure_future(batcher.submit(2))
        await worker.wait_entered()  # [2] runs (and is held): the next requests find the worker busy
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in (3, 4, 5)]
        await until(lambda: batcher.queue_depth == 3)
        worker.gate.set()
        assert await asyncio.gather(first, *rest) == [4, 6, 8, 10]
        assert worker.batches == [[1], [2], [3, 4, 5]]  # the three queued behind the busy worker ran together
        assert metrics.batches == [(1, "idle"), (1, "idle"), (3, "idle")]
        await batcher.stop()

    run(scenario)


def test_without_idle_dispatch_a_lone_request_waits_out_the_delay() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=8, max_queue_delay_s=0.2, dispatch_when_idle=False)
        started = time.monotonic()
        assert await batcher.submit(1) == 2
        assert time.monotonic() - started >= 0.2
        assert metrics.batches == [(1, "delay")]
        await batcher.stop()

    run(scenario)


def test_latency_policy_stops_a_batch_growing_past_its_oldest_requests_budget() -> None:
    async def scenario() -> None:
        worker, metrics = Worker(), RecordingMetrics()
        batcher = make(worker, metrics, max_batch_size=8, policy="latency", latency_budget_s=3.5)
        batcher.batch_times.observe(1, 1.0)  # fitted: 1 s per image, so the test's own pace is negligible
        batcher.batch_times.observe(2, 2.0)
        worker.gate.clear()
        first = asyncio.ensure_future(batcher.submit(1))
        await worker.wait_entered()  # [1] runs (held), predicted to take 1 s more
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3, 4, 5)]
        await until(lambda: batcher.queue_depth == 4)
        worker.gate.set()
        assert await asyncio.gather(first, *rest) == [2, 4, 6, 8, 10]
        # Behind 1 s of running batch, 2 images (2 s) keep the oldest within 3.5 s, 3 (3 s) would not.
        assert worker.batches[:2] == [[1], [2, 3]]
        assert metrics.batches[:2] == [(1, "idle"), (2, "budget")]
        assert sorted(worker.seen) == [1, 2, 3, 4, 5]
        await batcher.stop()

    run(scenario)


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        DynamicBatcher("test", Worker(), max_batch_size=1, max_queue_delay_s=0, max_queue_size=1, policy="x")


def test_throughput_is_full_batches_per_second_from_the_fitted_batch_times() -> None:
    async def run() -> None:
        for workers, expected in ((1, 4 / 0.05), (2, 2 * 4 / 0.05)):
            batcher: DynamicBatcher[int, int] = DynamicBatcher(
                "test",
                lambda items: items,
                max_batch_size=4,
                max_queue_delay_s=0.005,
                max_queue_size=16,
                workers=workers,
            )
            assert batcher.throughput() is None  # nothing observed yet
            batcher.batch_times.observe(1, 0.02)  # 10 ms per image + 10 ms per batch
            batcher.batch_times.observe(2, 0.03)
            assert batcher.throughput() == pytest.approx(expected)
            # In batches of 2 (the stream frames' size): 2 images per 30 ms per worker.
            assert batcher.throughput(2) == pytest.approx(workers * 2 / 0.03)

    asyncio.run(run())


def test_throughput_at_a_size_that_has_run_is_from_its_own_times() -> None:
    """Single frames at 10 ms, and a few slow batches of 2: the line through both would put a single
    frame at 4 ms (or, the other way, far too slow); the size's own moving average keeps it at 10 ms."""
    batcher: DynamicBatcher[int, int] = DynamicBatcher(
        "test", lambda items: items, max_batch_size=4, max_queue_delay_s=0.005, max_queue_size=16
    )
    for _ in range(20):
        batcher.batch_times.observe(1, 0.010)
    for _ in range(3):
        batcher.batch_times.observe(2, 0.060)
    assert batcher.batch_times.seconds(1) != pytest.approx(0.010, rel=0.2)  # the line is tilted
    assert batcher.throughput(1) == pytest.approx(100.0)

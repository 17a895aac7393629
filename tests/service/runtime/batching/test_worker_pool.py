"""`WorkerPool` through `DynamicBatcher(workers=N)`: batches run side by side in N threads, a batch goes
to an idle worker, the pool shares one batch-time model, and stop drains every running batch."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Sequence

import pytest

from service.runtime.batching.batch_close import solo_pays
from service.runtime.batching.batch_worker import NoMetrics, Pending
from service.runtime.batching.batcher import DynamicBatcher
from service.runtime.batching.worker_pool import WorkerPool


async def _two_at_once(workers: int) -> list[object]:
    """Two single-image batches whose work only finishes when both run at the same time."""
    barrier = threading.Barrier(2, timeout=1.0)

    def run_batch(items: list[int]) -> Sequence[int]:
        barrier.wait()  # BrokenBarrierError after 1 s unless another batch runs meanwhile
        return [i * 10 for i in items]

    batcher: DynamicBatcher[int, int] = DynamicBatcher(
        "m", run_batch, max_batch_size=1, max_queue_delay_s=0, max_queue_size=8,
        dispatch_when_idle=True, workers=workers,
    )  # fmt: skip
    batcher.start()
    try:
        return await asyncio.gather(batcher.submit(1), batcher.submit(2), return_exceptions=True)
    finally:
        await batcher.stop(timeout=5)


def test_two_workers_run_two_batches_at_once() -> None:
    assert asyncio.run(_two_at_once(workers=2)) == [10, 20]


def test_one_worker_runs_one_batch_at_a_time() -> None:
    # The same work with one worker: the first batch waits at the barrier alone and fails.
    results = asyncio.run(_two_at_once(workers=1))
    assert any(isinstance(r, Exception) for r in results), results


def test_the_pool_is_idle_while_any_worker_is_and_shares_one_time_model() -> None:
    async def scenario() -> None:
        release = threading.Event()

        def run_batch(items: list[int]) -> Sequence[int]:
            release.wait(5)
            return items

        changed = asyncio.Event()
        pool: WorkerPool[int, int] = WorkerPool("m", run_batch, NoMetrics(), changed.set, count=2)
        assert all(w.batch_times is pool.batch_times for w in pool.workers)
        loop = asyncio.get_running_loop()

        def batch(*items: int) -> list[Pending[int, int]]:
            return [Pending(i, loop.create_future(), time.monotonic(), math.inf) for i in items]

        first, second = batch(1, 2, 3), batch(4)
        pool.dispatch(first)
        assert pool.idle and not pool.all_idle and pool.next_free() == (0, 0.0)
        pool.dispatch(second)
        assert not pool.idle and pool.running_images == 4
        size, _ = pool.next_free()
        assert size in (1, 3)
        with pytest.raises(RuntimeError, match="every worker busy"):
            pool.dispatch(batch(5))  # no idle worker: the batcher never does this
        release.set()
        await asyncio.wait_for(asyncio.gather(*(p.future for p in first + second)), 5)
        for _ in range(100):
            if pool.all_idle:
                break
            await asyncio.sleep(0.01)
        assert pool.all_idle and pool.batch_times.known
        pool.shutdown()

    asyncio.run(scenario())


def test_stop_waits_for_every_running_batch() -> None:
    async def scenario() -> list[int]:
        def run_batch(items: list[int]) -> Sequence[int]:
            time.sleep(0.2)
            return items

        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            "m", run_batch, max_batch_size=1, max_queue_delay_s=0, max_queue_size=8,
            dispatch_when_idle=True, workers=2,
        )  # fmt: skip
        batcher.start()
        tasks = [asyncio.create_task(batcher.submit(i)) for i in (7, 8)]
        await asyncio.sleep(0.05)
        await batcher.stop(timeout=5)
        return [t.result() for t in tasks]

    assert asyncio.run(scenario()) == [7, 8]


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool("m", lambda items: items, NoMetrics(), lambda: None, count=0)


def test_a_free_worker_takes_its_share_and_leaves_the_rest_for_the_other() -> None:
    async def scenario() -> None:
        release = threading.Event()

        def run_batch(items: list[int]) -> Sequence[int]:
            release.wait(5)
            return items

        pool: WorkerPool[int, int] = WorkerPool("m", run_batch, NoMetrics(), lambda: None, count=2)
        assert pool.share(6) == 6  # nothing fitted yet: the whole batch
        pool.batch_times.observe(1, 0.017)
        pool.batch_times.observe(4, 0.068)  # fitted: 17 ms per image, nothing per batch
        assert pool.share(6) == 3  # both free: half each
        loop = asyncio.get_running_loop()
        pool.dispatch([Pending(1, loop.create_future(), time.monotonic(), math.inf)])
        assert pool.share(6) == 3  # the other frees in <= 17 ms: still about half
        release.set()
        pool.shutdown()

    asyncio.run(scenario())


def test_one_worker_splits_a_closed_batch_only_under_the_adaptive_policy() -> None:
    pool: WorkerPool[int, int] = WorkerPool("m", lambda items: items, NoMetrics(), lambda: None, count=1)
    assert pool.share(6, adaptive=True) == 6  # no batch timed yet: the whole batch
    pool.batch_times.observe(1, 0.008)
    # Only single requests timed: the fit (proportional) promises nothing; the adaptive policy runs one,
    # where the fixed one would take the whole batch to learn the per-batch cost.
    assert not pool.batch_times.fitted
    assert pool.share(6, rate=10.0, max_batch_size=8, adaptive=True) == 1
    for _ in range(5):
        pool.batch_times.observe(1, 0.008)
        pool.batch_times.observe(4, 0.040)  # four cost more than four of one
    assert pool.share(6, rate=10.0, max_batch_size=8) == 6  # fixed: the whole closed batch
    assert pool.share(6, rate=10.0, max_batch_size=8, adaptive=True) == 1
    pool.shutdown()


def test_the_adaptive_policy_trusts_the_fit_for_a_size_not_yet_run_only_where_batch_times_are_linear() -> (
    None
):
    for linear, share in ((True, 6), (False, 1)):
        pool: WorkerPool[int, int] = WorkerPool(
            "m", lambda items: items, NoMetrics(), lambda: None, fit_predicts_sizes=linear
        )
        pool.batch_times.seed({1: 0.010, 8: 0.017})  # the warmup: a batch costs little more than one image
        pool.batch_times.observe(1, 0.010)
        # Six waiting at low load: the line says one batch of six; only a runtime it describes takes it.
        assert pool.share(6, rate=10.0, max_batch_size=8, adaptive=True) == share
        pool.shutdown()


def test_the_adaptive_policy_runs_a_batch_that_costs_more_one_request_at_a_time() -> None:
    async def scenario() -> list[int]:
        sizes: list[int] = []

        def run_batch(items: list[int]) -> Sequence[int]:
            sizes.append(len(items))
            time.sleep(0.015 * len(items) - 0.005)  # a batch costs more than its images one by one
            return items

        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            "m", run_batch, max_batch_size=8, max_queue_delay_s=0.005, max_queue_size=16,
            dispatch_when_idle=True, policy="adaptive",
        )  # fmt: skip
        for _ in range(3):
            batcher.batch_times.observe(1, 0.010)
            batcher.batch_times.observe(4, 0.055)
        batcher.start()
        try:
            assert await asyncio.gather(*(batcher.submit(i) for i in range(4))) == [0, 1, 2, 3]
        finally:
            await batcher.stop(timeout=5)
        return sizes

    assert asyncio.run(scenario()) == [1, 1, 1, 1]


def test_the_part_of_a_closed_batch_that_runs_first_is_its_interactive_items() -> None:
    """A stream frame waiting on deck, then an interactive request: when the worker frees and takes one of
    the two, it takes the interactive one (the frame runs after it)."""

    async def scenario() -> list[list[str]]:
        batches: list[list[str]] = []
        gate = threading.Event()

        def run_batch(items: list[str]) -> Sequence[str]:
            batches.append(list(items))
            if items == ["running"]:
                gate.wait(10)
            return items

        batcher: DynamicBatcher[str, str] = DynamicBatcher(
            "m", run_batch, max_batch_size=8, max_queue_delay_s=0.005, max_queue_size=16,
            dispatch_when_idle=True, policy="adaptive", stream_batch_size=1,
        )  # fmt: skip
        for _ in range(3):
            batcher.batch_times.observe(1, 0.010)
            batcher.batch_times.observe(2, 0.030)  # two cost more than two of one
        batcher.start()
        try:
            running = asyncio.ensure_future(batcher.submit("running"))
            while not batches:
                await asyncio.sleep(0.001)
            frame = asyncio.ensure_future(batcher.submit("frame", priority="stream"))
            await asyncio.sleep(0.01)
            asked = asyncio.ensure_future(batcher.submit("interactive"))
            await asyncio.sleep(0.01)
            gate.set()
            assert list(await asyncio.gather(running, frame, asked)) == ["running", "frame", "interactive"]
        finally:
            await batcher.stop(timeout=5)
        return batches

    assert asyncio.run(scenario()) == [["running"], ["interactive"], ["frame"]]


def test_on_a_pool_a_batch_past_a_quarter_of_the_latency_budget_runs_only_stream_frames() -> None:
    from service.runtime.batching.close_rules import CloseRules

    pool: WorkerPool[int, int] = WorkerPool("m", lambda items: items, NoMetrics(), lambda: None, count=2)
    for _ in range(3):  # a large cost per batch: every size pays, and a pair takes 26 ms
        for size, seconds in ((1, 0.020), (2, 0.026), (3, 0.032), (4, 0.038)):
            pool.batch_times.observe(size, seconds)
    rules = CloseRules(
        pool, policy="adaptive", max_batch_size=8, max_queue_delay_s=0.005, deadline_margin_s=0.0,
        dispatch_when_idle=True, latency_budget_s=0.1,
    )  # fmt: skip
    now = time.monotonic()
    assert rules.share(4, now) == 1  # 26 ms is past 25: one request on each free stream
    assert rules.share(4, now, frames_only=True) == 2  # frames alone: the split that serves them best
    pool.shutdown()


def test_a_solo_batch_holds_every_member_until_it_ends() -> None:
    """The solo worker (a runtime's graph for one image on every thread) runs one request while the pool
    is otherwise idle; meanwhile no member takes a batch, and the pool waits for it like a running one."""

    async def scenario() -> None:
        release = threading.Event()

        def run_batch(items: list[int]) -> Sequence[int]:
            return items

        def run_solo(items: list[int]) -> Sequence[int]:
            release.wait(5)
            return [-i for i in items]

        changed = asyncio.Event()
        pool: WorkerPool[int, int] = WorkerPool(
            "m", run_batch, NoMetrics(), changed.set, count=2, run_solo=run_solo
        )
        assert pool.solo is not None and pool.solo.batch_times is not pool.batch_times
        loop = asyncio.get_running_loop()
        lone = [Pending(7, loop.create_future(), time.monotonic(), math.inf)]
        pool.dispatch(lone, solo=True, rate=1.0)
        pool.arrived()  # two requests arrive while it runs
        pool.arrived()
        assert not pool.idle and not pool.all_idle and pool.next_idle() is None
        assert pool.running_images == 1 and pool.next_free()[0] == 1
        with pytest.raises(RuntimeError, match="idle pool"):
            pool.dispatch([Pending(8, loop.create_future(), time.monotonic(), math.inf)], solo=True)
        release.set()
        assert await asyncio.wait_for(lone[0].future, 5) == -7
        for _ in range(100):
            if pool.all_idle:
                break
            await asyncio.sleep(0.01)
        assert pool.all_idle and pool.solo.batch_times.known and not pool.batch_times.known
        assert pool.held_up.share > 2.0  # two where ~0.01 were due at 1 request/s
        pool.shutdown()

    asyncio.run(scenario())


def test_the_pool_goes_solo_only_when_idle_with_both_warmup_times_and_at_a_rate_it_pays() -> None:
    pool: WorkerPool[int, int] = WorkerPool("m", list, NoMetrics(), lambda: None, count=2, run_solo=list)
    assert pool.solo is not None
    assert not pool.solo_now(rate=1.0)  # no warmup times yet
    pool.batch_times.seed({1: 0.017})
    pool.solo.batch_times.seed({1: 0.010})
    assert pool.solo_now(rate=1.0)
    assert not pool.solo_now(rate=500.0)  # the requests it would hold up lose more than it saves
    pool.held_up.ran(arrived=0, expected=1.0)  # a client that sends only once answered
    assert pool.solo_now(rate=500.0)
    pool.workers[0].idle = False  # a member runs a batch
    assert not pool.solo_now(rate=1.0)
    one: WorkerPool[int, int] = WorkerPool("m", list, NoMetrics(), lambda: None, count=1, run_solo=list)
    assert one.solo is None and not one.solo_now(rate=1.0)  # one worker already has every thread
    pool.shutdown()
    one.shutdown()


def test_the_batcher_runs_a_lone_request_solo_and_concurrent_ones_on_the_streams() -> None:
    async def scenario() -> None:
        solo_release = threading.Event()

        def run_batch(items: list[int]) -> Sequence[tuple[str, int]]:
            time.sleep(0.017)
            return [("stream", i) for i in items]

        def run_solo(items: list[int]) -> Sequence[tuple[str, int]]:
            solo_release.wait(5)
            time.sleep(0.010)
            return [("solo", i) for i in items]

        metrics = _CountingSolo()
        batcher: DynamicBatcher[int, tuple[str, int]] = DynamicBatcher(
            "m", run_batch, max_batch_size=1, max_queue_delay_s=0, max_queue_size=8, metrics=metrics,
            dispatch_when_idle=True, policy="adaptive", workers=2, run_solo=run_solo,
        )  # fmt: skip
        assert batcher.solo_batch_times is not None
        # The solo graph far faster than a stream: it pays at any rate these requests arrive at.
        batcher.batch_times.seed({1: 1.0})
        batcher.solo_batch_times.seed({1: 0.001})
        batcher.start()
        try:
            solo_release.set()
            assert await batcher.submit(1) == ("solo", 1)
            # Three at once: the first two start with others waiting, so on the streams (the third runs
            # solo only if both streams are done by the time it starts).
            together = await asyncio.gather(*(batcher.submit(i) for i in (2, 3, 4)))
            assert [where for where, _ in together][:2] == ["stream", "stream"]
            assert [i for _, i in together] == [2, 3, 4]
            # One that arrives while a solo batch runs waits for it (the streams are held), then runs.
            solo_release.clear()
            first = asyncio.ensure_future(batcher.submit(5))
            await asyncio.sleep(0.05)
            second = asyncio.ensure_future(batcher.submit(6))
            await asyncio.sleep(0.05)
            assert not first.done() and not second.done() and batcher.queue_depth == 1
            solo_release.set()
            assert await asyncio.wait_for(first, 5) == ("solo", 5)
            assert (await asyncio.wait_for(second, 5))[1] == 6
            assert metrics.solo >= 2
            # A client that sends the next request only once answered (~90 a second): were its requests
            # independent, the solo graph would cost the ones it holds up more than it saves (7 ms), but
            # none arrives during a lone request's run, so they go solo.
            batcher.solo_batch_times.seed({1: 0.010})
            batcher.batch_times.seed({1: 0.017})
            answers = [await batcher.submit(i) for i in range(40)]
            assert [where for where, _ in answers[-10:]] == ["solo"] * 10
            assert batcher._worker.held_up.share < 0.1
            assert not solo_pays(0.017, 0.010, 0.010, rate=90.0, held_share=1.0)
        finally:
            await batcher.stop(timeout=5)

    asyncio.run(scenario())


class _CountingSolo(NoMetrics):
    def __init__(self) -> None:
        self.solo = 0

    def solo_batch(self) -> None:
        self.solo += 1

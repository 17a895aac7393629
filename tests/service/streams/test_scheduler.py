"""The live rounds: questions asked together are answered together, within the model's budget."""

from __future__ import annotations

import asyncio
import math

from service.streams.schedule import Candidate, SchedulePolicy
from service.streams.scheduler import BudgetConfig, DetectionScheduler

POLICY = SchedulePolicy(active_every_frames=5, idle_every_s=1.0, motion_threshold=0.02)


def _waiting(key: str, seconds: float) -> Candidate:
    return Candidate(key, 1, seconds, 0, 0, 0.0)


async def _round(scheduler: DetectionScheduler, candidates: list[Candidate], model: str = "m") -> list[bool]:
    return list(await asyncio.gather(*(scheduler.decide(model, c) for c in candidates)))


def test_unknown_throughput_detects_everything_and_a_known_one_limits() -> None:
    throughput: dict[str, float | None] = {"m": None}
    now = [0.0]
    reported: list[tuple[str, float]] = []
    scheduler = DetectionScheduler(
        POLICY,
        BudgetConfig(share=0.5, interval_s=0.001),
        throughput.get,
        clock=lambda: now[0],
        report=lambda model, rate: reported.append((model, rate)),
    )

    async def run() -> None:
        assert scheduler.rate("m") == math.inf
        assert await _round(scheduler, [_waiting(f"s{i}", 0.1) for i in range(6)]) == [True] * 6
        throughput["m"] = 16.0  # 8 frames/s for streams: 2 tokens of burst (0.25 s), spent by the first
        assert scheduler.rate("m") == 8.0
        now[0] = 10.0
        answers = await _round(scheduler, [_waiting(f"s{i}", 0.1 * (i + 1)) for i in range(6)])
        assert answers == [False] * 4 + [True] * 2  # the two longest without a detection
        now[0] = 10.125  # one more token
        answers = await _round(scheduler, [_waiting(f"s{i}", 0.1 * (i + 1)) for i in range(6)])
        assert sum(answers) == 1 and answers[5]
        forced = Candidate("new", None, math.inf, 0, 0, 0.0)  # never detected: over the budget too
        assert await _round(scheduler, [forced, _waiting("s0", 0.5)]) == [True, False]

    asyncio.run(run())
    assert reported == [("m", math.inf), ("m", 8.0), ("m", 8.0), ("m", 8.0)]  # each round's budget


def test_a_fixed_budget_and_models_apart() -> None:
    scheduler = DetectionScheduler(
        POLICY, BudgetConfig(fixed_fps=4.0, interval_s=0.001), lambda model: 1000.0, clock=lambda: 0.0
    )

    async def run() -> None:
        assert scheduler.rate("a") == scheduler.rate("b") == 4.0
        first = await asyncio.gather(
            _round(scheduler, [_waiting(f"a{i}", 0.1) for i in range(3)], "a"),
            _round(scheduler, [_waiting(f"b{i}", 0.1) for i in range(3)], "b"),
        )
        assert [sum(answers) for answers in first] == [1, 1]  # each model its own budget (1 token burst)

    asyncio.run(run())


def test_a_question_cancelled_before_its_round_is_left_out() -> None:
    scheduler = DetectionScheduler(POLICY, BudgetConfig(interval_s=0.01), lambda model: None)

    async def run() -> None:
        gone = asyncio.ensure_future(scheduler.decide("m", _waiting("gone", 0.1)))
        await asyncio.sleep(0)
        gone.cancel()
        assert await scheduler.decide("m", _waiting("kept", 0.1)) is True

    asyncio.run(run())


def test_an_idle_detector_takes_a_batch_beyond_the_budget_without_spending_it() -> None:
    spare = {"m": 4}
    scheduler = DetectionScheduler(
        POLICY,
        BudgetConfig(share=1.0, interval_s=0.001),
        lambda model: 4.0,  # 1 token of burst
        clock=lambda: 0.0,
        spare=spare.get,
    )

    async def run() -> None:
        answers = await _round(scheduler, [_waiting(f"s{i}", 0.1 * (i + 1)) for i in range(6)])
        assert answers == [False, False, True, True, True, True]  # a batch of 4, the most urgent
        assert scheduler._budgets["m"].tokens == 0.0  # its one token spent, the other three free
        spare["m"] = 0  # busy: the budget alone, and it is empty
        answers = await _round(scheduler, [_waiting(f"s{i}", 0.1 * (i + 1)) for i in range(6)])
        assert answers == [False] * 6

    asyncio.run(run())


def test_a_fixed_budget_is_a_cap_even_for_an_idle_detector() -> None:
    scheduler = DetectionScheduler(
        POLICY, BudgetConfig(fixed_fps=4.0, interval_s=0.001), lambda model: None, lambda: 0.0, lambda m: 8
    )

    async def run() -> None:
        assert sum(await _round(scheduler, [_waiting(f"s{i}", 0.1) for i in range(6)])) == 1

    asyncio.run(run())

"""The live detection budget of stream sessions: rounds on the event loop that decide, for every
session with a new frame, whether it goes to the detector or is answered by its tracker.

A session asks `DetectionScheduler.decide` with its `Candidate`; the first question opens a round that
runs ``interval_s`` later (so the sessions whose frames arrive meanwhile are ranked together), and every
question of the round is answered by `service.streams.schedule.choose` within the model's budget: the
stream share of the model's throughput (``stream_detect_share`` x images per second in batches of stream
frames, from the time its batcher measures for one), or a fixed ``stream_detect_budget_fps``.
While the model's throughput is not known yet (no batch has run), every frame is detected. The measured
budget is also work-conserving: when nothing waits for the model's detector at a round (a batch may be
running), up to a batch of the round's frames go to it beyond the budget, without spending it: they wait
on deck and start the moment the running batch ends, so the detector does not idle while frames wait
(a frame decided only once the detector is idle would leave it idle for the round's wait and the
hand-off). Interactive requests still go ahead of a frame on deck. Nothing runs while no session asks:
no task, no timer.

Stream frames still enter the batcher at stream priority, so interactive requests go first whatever the
budget; the share leaves the rest of the detector's time to them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from service.streams.schedule import Candidate, SchedulePolicy, TokenBudget, choose

# A session counts towards the fair share of the budget while it asked within this many seconds.
_ASKED_WINDOW_S = 2.0


@dataclass(frozen=True)
class BudgetConfig:
    """Settings ``stream_detect_share``, ``stream_detect_budget_fps`` (0: measured) and
    ``stream_schedule_interval_ms``."""

    share: float = 0.8
    fixed_fps: float = 0.0
    interval_s: float = 0.01


class DetectionScheduler:
    """See the module's docstring. ``throughput(model)`` -> images per second, None while unknown."""

    def __init__(
        self,
        policy: SchedulePolicy,
        config: BudgetConfig,
        throughput: Callable[[str], float | None],
        clock: Callable[[], float] = time.monotonic,
        spare: Callable[[str], int] = lambda model: 0,
        report: Callable[[str, float], None] = lambda model, rate: None,
    ):
        self.policy = policy
        self.config = config
        self._throughput = throughput
        self._clock = clock
        self._spare = spare  # model -> frames that may go on deck now beyond the budget (nothing waits)
        self._report = report  # (model, the budget's frames per second) at each round
        self._budgets: dict[str, TokenBudget] = {}
        self._waiting: dict[str, list[tuple[Candidate, asyncio.Future[bool]]]] = {}
        self._round: asyncio.TimerHandle | None = None
        self._asked: dict[str, dict[str, float]] = {}  # model -> session -> when it last asked

    def rate(self, model: str) -> float:
        """Stream frames per second the model's budget allows (inf: no limit known)."""
        if self.config.fixed_fps > 0:
            return self.config.fixed_fps
        measured = self._throughput(model)
        if measured is None or not measured > 0:
            return math.inf
        return self.config.share * measured

    async def decide(self, model: str, candidate: Candidate) -> bool:
        """True: detect the session's frame; False: answer it from its tracker."""
        loop = asyncio.get_running_loop()
        decision: asyncio.Future[bool] = loop.create_future()
        self._waiting.setdefault(model, []).append((candidate, decision))
        if self._round is None:
            self._round = loop.call_later(self.config.interval_s, self._run_round)
        return await decision

    def _sessions_asking(
        self, model: str, entries: list[tuple[Candidate, asyncio.Future[bool]]], now: float
    ) -> int:
        """Sessions of ``model`` that asked in the last 2 s (this round's included)."""
        asked = self._asked.setdefault(model, {})
        for candidate, _ in entries:
            asked[candidate.key] = now
        for key in [k for k, at in asked.items() if now - at > _ASKED_WINDOW_S]:
            del asked[key]
        return len(asked)

    def _run_round(self) -> None:
        self._round = None
        waiting, self._waiting = self._waiting, {}
        now = self._clock()
        for model, entries in waiting.items():
            entries = [(c, d) for c, d in entries if not d.done()]  # a session stopped meanwhile
            budget = self._budgets.get(model)
            if budget is None:
                budget = self._budgets[model] = TokenBudget(self.rate(model))
            budget.set_rate(self.rate(model))
            self._report(model, budget.rate)
            budget.refill(now)
            wanted = len(entries)
            slots, room = budget.slots(wanted), budget.forced_room(wanted)
            on_deck = 0 if self.config.fixed_fps > 0 else min(wanted, self._spare(model))
            fair_age = self._sessions_asking(model, entries, now) / budget.rate
            picked = set(choose((c for c, _ in entries), max(slots, on_deck), self.policy, room, fair_age))
            budget.spend(max(0, len(picked) - max(0, on_deck - slots)))  # frames on deck are free
            for candidate, decision in entries:
                decision.set_result(candidate.key in picked)

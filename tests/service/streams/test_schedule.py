"""Which sessions' frames the detector gets: hard bounds, the budget, the priority, determinism."""

from __future__ import annotations

import math

import pytest

from service.streams.schedule import (
    Candidate,
    SchedulePolicy,
    TokenBudget,
    choose,
    must_detect,
    start_deadline_s,
    urgency,
)

POLICY = SchedulePolicy(active_every_frames=5, idle_every_s=1.0, motion_threshold=0.02)


def _c(
    key: str, since: int | None = 1, seconds: float = 0.1, tracks: int = 0, new: int = 0, motion: float = 0.0
):
    return Candidate(key, since, math.inf if since is None else seconds, tracks, new, motion)


def test_hard_bounds() -> None:
    assert must_detect(_c("never", since=None), POLICY)
    assert must_detect(_c("tracks", since=4, tracks=2), POLICY)  # its 5th frame since the detection
    assert not must_detect(_c("tracks", since=3, tracks=2), POLICY)
    assert must_detect(_c("moving", since=4, motion=0.5), POLICY)
    assert not must_detect(_c("idle", since=10, seconds=0.9), POLICY)  # idle: by time, not frames
    assert must_detect(_c("idle", since=1, seconds=1.0), POLICY)
    # A new object: the first frame decided after its detection, however many were answered while the
    # detection ran (its next detection gives the track its velocity).
    assert must_detect(_c("new", since=0, new=1), POLICY)
    assert must_detect(_c("new", since=3, new=1), POLICY)


def test_forced_frames_go_even_over_the_budget_and_the_rest_by_urgency() -> None:
    candidates = [
        _c("a", since=4, tracks=1),  # forced
        _c("b", since=None),  # forced
        _c("c", since=1, seconds=0.3, tracks=1),  # urgency 0.6
        _c("d", since=1, seconds=0.5),  # urgency 0.5
        _c("e", since=1, seconds=0.25, motion=0.04),  # urgency 0.25 x 3 = 0.75
    ]
    assert choose(candidates, 0, POLICY) == ["b", "a"]
    assert choose(candidates, 3, POLICY) == ["b", "a", "e"]
    assert choose(candidates, 4, POLICY) == ["b", "a", "e", "c"]
    assert choose(candidates, 10, POLICY) == ["b", "a", "e", "c", "d"]
    assert choose(reversed(candidates), 4, POLICY) == choose(candidates, 4, POLICY)  # deterministic


def test_urgency_grows_with_time_tracks_new_objects_and_motion() -> None:
    base = urgency(_c("x", seconds=0.5), POLICY)
    assert base == pytest.approx(0.5)
    assert urgency(_c("x", seconds=0.5, tracks=3), POLICY) == pytest.approx(1.0)
    assert urgency(_c("x", seconds=0.5, new=1), POLICY) == pytest.approx(0.75)
    assert urgency(_c("x", seconds=0.5, motion=1.0), POLICY) == pytest.approx(1.5)  # motion capped at 2


def test_constant_flicker_costs_one_detection_every_k_frames_per_session() -> None:
    """Every session sees motion everywhere (flicker) and the budget is empty: each is still detected
    exactly every K frames, none more often, none starved."""
    sessions = {f"s{i}": 0 for i in range(8)}
    detected = dict.fromkeys(sessions, 0)
    for _ in range(100):
        candidates = [_c(k, since=n, seconds=n / 15, motion=1.0) for k, n in sessions.items()]
        picked = set(choose(candidates, 0, POLICY))
        for key in sessions:
            sessions[key] = 0 if key in picked else sessions[key] + 1
            detected[key] += key in picked
    assert set(detected.values()) == {20}


def test_token_budget_fills_at_its_rate_up_to_its_burst() -> None:
    budget = TokenBudget(rate=40.0, burst_s=0.25)  # 10 tokens at most
    budget.refill(0.0)
    assert budget.slots(100) == 10
    budget.spend(10)
    budget.refill(0.05)
    assert budget.slots(100) == 2
    assert budget.forced_room(100) == 12  # forced frames may overdraw it by one burst
    budget.spend(30)  # they went anyway: its debt is kept, up to a second of it
    assert budget.tokens == pytest.approx(-28.0)
    budget.spend(100)
    assert budget.tokens == pytest.approx(-40.0)
    budget.refill(0.3)
    assert budget.slots(100) == 0 and budget.forced_room(100) == 0
    budget.refill(10.0)
    assert budget.slots(3) == 3 and budget.tokens == pytest.approx(10.0)
    unlimited = TokenBudget(math.inf)
    unlimited.refill(0.0)
    unlimited.spend(1000)
    assert unlimited.slots(64) == 64


def test_bad_policies_are_refused() -> None:
    for bad in ({"active_every_frames": 0}, {"idle_every_s": 0.0}, {"motion_threshold": -1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SchedulePolicy(**bad)  # type: ignore[arg-type]


def test_forced_frames_past_the_room_go_when_they_waited_their_fair_share() -> None:
    candidates = [_c(f"s{i}", since=6, seconds=0.1 * i, tracks=1) for i in range(1, 6)]  # all forced
    assert choose(candidates, 0, POLICY, forced_room=2) == ["s5", "s4"]  # the longest waiting first
    assert choose(candidates, 0, POLICY, forced_room=0, fair_age_s=0.3) == ["s5", "s4", "s3"]
    assert choose(candidates, 0, POLICY, forced_room=1, fair_age_s=0.3) == ["s5", "s4", "s3"]


def test_the_start_deadline_is_a_few_batches_at_least_a_frame_at_most_the_lag_bound() -> None:
    assert start_deadline_s(1.0, 2.0, 0.12, 15.0) == pytest.approx(0.24)
    assert start_deadline_s(1.0, 2.0, 0.001, 15.0) == pytest.approx(1 / 15)  # never under a frame interval
    assert start_deadline_s(1.0, 2.0, 0.8, 15.0) == 1.0  # never over stream_max_lag_ms
    assert start_deadline_s(1.0, 2.0, None, 15.0) == 1.0  # batch time not measured yet
    assert start_deadline_s(1.0, 0.0, 0.12, 15.0) == 1.0  # off

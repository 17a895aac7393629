"""Which sessions' newest frames go to the detector: a pure rule, and the budget it spends.

Each round the waiting sessions are candidates. `choose` takes, in this order:

1. every session that must be detected now (hard bounds, even over the budget by up to one burst): one
   never detected (or whose frames changed size); one whose last detection started or confirmed a track
   (a new object: its first frame decided after that detection, however many frames were answered while
   the detection ran, confirms it and gives its velocity, which the frames in between are predicted
   with); an active one (live tracks, or a motion score at least ``motion_threshold``) whose frame would
   be the ``active_every_frames``-th since its last detection; any one whose last detection is
   ``idle_every_s`` old (so a 1 fps camera is not left K seconds behind by busy 30 fps ones). Among them
   the longest without a detection goes first, so when they are too many, they take turns;
2. then, while the budget has slots, the others by urgency: seconds since the last detection times a
   weight, 1 + 1 with live tracks + 0.5 per new track at the last detection (at most 2) + the motion score
   over its threshold (at most 2) + 8 x the drift (at most 4): how far its fastest track has moved since
   the last detection, in box sizes, so cameras with fast objects are detected more often than cameras
   with slow ones. Ties go by key, so a round is deterministic.

The budget (`TokenBudget`) fills at the stream share of the detector's throughput (frames per second)
and holds at most ``burst_s`` of it; the frames a round picks are spent from it, forced ones too: it may
go below zero (its debt is kept up to a second of it), and the next rounds then pick only forced frames,
at most one burst below zero, until it refills. When the hard bounds ask more than that (more cameras
with activity than the detector can follow every ``active_every_frames`` frames), a forced frame beyond
it goes only when its session has waited its fair share, sessions / rate seconds since its last
detection (the sessions that asked in the last 2 s): the detector's queue and the lag stay bounded and
every session keeps its turn, whichever round its frames happen to arrive in. The same rule runs live
(`service.streams.scheduler`) and on a simulated clock (`bench.streams.replay`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulePolicy:
    """The bounds of `choose` (settings ``stream_detect_every_max_frames``, ``stream_idle_detect_s``,
    ``stream_motion_threshold``)."""

    active_every_frames: int = 5
    idle_every_s: float = 1.0
    motion_threshold: float = 0.02

    def __post_init__(self) -> None:
        if self.active_every_frames < 1:
            raise ValueError(f"active_every_frames must be >= 1, got {self.active_every_frames!r}")
        if not self.idle_every_s > 0:
            raise ValueError(f"idle_every_s must be > 0, got {self.idle_every_s!r}")
        if not self.motion_threshold > 0:
            raise ValueError(f"motion_threshold must be > 0, got {self.motion_threshold!r}")


@dataclass(frozen=True)
class Candidate:
    """A session with a frame waiting for the round's decision."""

    key: str
    frames_since: int | None  # frames answered by prediction since its last detection; None: never
    seconds_since: float  # since its last detected frame's capture (inf: never)
    live_tracks: int
    new_tracks: int  # tracks its last detection started or confirmed
    motion: float  # its newest frame's motion score, 0..1
    drift: float = 0.0  # its fastest live track's move since the last detection, in box sizes

    def active(self, policy: SchedulePolicy) -> bool:
        return self.live_tracks > 0 or self.motion >= policy.motion_threshold


def must_detect(candidate: Candidate, policy: SchedulePolicy) -> bool:
    """The hard bounds (see the module's docstring)."""
    if candidate.frames_since is None or not math.isfinite(candidate.seconds_since):
        return True
    if candidate.new_tracks:  # the first frame after a new object's detection (however many waited)
        return True
    if candidate.seconds_since >= policy.idle_every_s:  # any session: a slow camera's K frames are long
        return True
    return candidate.active(policy) and candidate.frames_since + 1 >= policy.active_every_frames


def urgency(candidate: Candidate, policy: SchedulePolicy) -> float:
    """How much a detection is worth to this session now (larger first)."""
    weight = 1.0 + (1.0 if candidate.live_tracks else 0.0)
    weight += min(2.0, 0.5 * candidate.new_tracks)
    weight += min(2.0, candidate.motion / policy.motion_threshold)
    weight += min(4.0, 8.0 * candidate.drift)
    return max(0.0, candidate.seconds_since) * weight


def choose(
    candidates: Iterable[Candidate],
    slots: int,
    policy: SchedulePolicy,
    forced_room: int | None = None,
    fair_age_s: float = math.inf,
) -> list[str]:
    """The keys of the candidates to detect this round: the forced ones (at most ``forced_room``, the
    longest without a detection first; None: all; beyond it, those that have waited ``fair_age_s``, their
    fair share of the budget), then the most urgent others up to ``slots`` in all."""
    pool = list(candidates)
    forced = [c for c in pool if must_detect(c, policy)]
    others = [c for c in pool if not must_detect(c, policy)]
    forced.sort(key=lambda c: (-c.seconds_since, c.key))  # the longest without a detection first
    others.sort(key=lambda c: (-urgency(c, policy), c.key))
    if forced_room is not None:
        room = max(0, forced_room)
        forced = forced[:room] + [c for c in forced[room:] if c.seconds_since >= fair_age_s]
    room = max(0, slots - len(forced))
    return [c.key for c in forced] + [c.key for c in others[:room]]


def start_deadline_s(max_lag_s: float, wait_batches: float, batch_s: float | None, fps: float) -> float:
    """How long after its capture a detected stream frame may wait to start inference: ``wait_batches``
    full batches of ``batch_s`` seconds (the model's measured batch time), at least one frame interval at
    ``fps`` (a shorter wait gains nothing: the next frame is not there yet), at most ``max_lag_s``, which
    is also the wait while the batch time is not known or ``wait_batches`` is 0."""
    if not wait_batches > 0 or batch_s is None or not batch_s > 0:
        return max_lag_s
    return min(max_lag_s, max(1.0 / fps, wait_batches * batch_s))


class TokenBudget:
    """Detections the stream frames may still start: fills at ``rate`` per second up to ``burst_s`` of
    it (at least one); ``rate`` inf is no limit."""

    def __init__(self, rate: float, burst_s: float = 0.25):
        self.burst_s = burst_s
        self.rate = rate
        self.tokens = self._cap
        self._at: float | None = None
        self.spent = 0

    @property
    def _cap(self) -> float:
        return math.inf if math.isinf(self.rate) else max(1.0, self.rate * self.burst_s)

    def set_rate(self, rate: float) -> None:
        if rate != self.rate:
            self.rate = rate
            self.tokens = min(self.tokens, self._cap) if math.isfinite(self.tokens) else self._cap

    def refill(self, now: float) -> None:
        if self._at is not None and math.isfinite(self.rate):
            self.tokens = min(self._cap, self.tokens + self.rate * max(0.0, now - self._at))
        elif math.isinf(self.rate):
            self.tokens = math.inf
        self._at = now

    def slots(self, wanted: int) -> int:
        """How many detections may start now (at most ``wanted``)."""
        if math.isinf(self.tokens):
            return wanted
        return max(0, min(wanted, int(self.tokens)))

    def forced_room(self, wanted: int) -> int:
        """How many forced detections may start now: the budget may be overdrawn by one burst, no more
        (so the detector's queue, and the lag, stay bounded when the hard bounds ask too much)."""
        if math.isinf(self.tokens):
            return wanted
        return max(0, min(wanted, int(self.tokens + self._cap)))

    def spend(self, count: int) -> None:
        self.spent += count
        if math.isfinite(self.tokens):
            # Debt is kept up to a second of the budget, so admissions past it (fair shares) are paid back.
            self.tokens = max(-max(self._cap, self.rate), self.tokens - count)

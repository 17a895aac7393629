"""A stream session's state machine, as the API reports it.

::

    starting ──> running <──> reconnecting
        │           │              │
        └───────────┴──────────────┴──> error (gave up; reason kept)
    any state ──> stopped (deleted, or the server shuts down)

``reconnecting`` and ``error`` carry the reason (the last error). Transitions come from the reader thread
and from the session's task, so they take a lock; a stopped session never changes state again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

State = Literal["starting", "running", "reconnecting", "error", "stopped"]
STATES: tuple[State, ...] = ("starting", "running", "reconnecting", "error", "stopped")

_ALLOWED: dict[State, frozenset[State]] = {
    "starting": frozenset({"running", "reconnecting", "error", "stopped"}),
    "running": frozenset({"reconnecting", "error", "stopped"}),
    "reconnecting": frozenset({"running", "error", "stopped"}),
    "error": frozenset({"stopped"}),
    "stopped": frozenset(),
}


class SessionState:
    """The current state, since when, and the last error; ``on_change(old, new)`` after each change."""

    def __init__(self, on_change: Callable[[State, State], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._state: State = "starting"
        self._since = time.time()
        self.last_error: str | None = None
        self._on_change = on_change

    @property
    def value(self) -> State:
        return self._state

    @property
    def since(self) -> float:
        """`time.time` of the last change."""
        return self._since

    def running(self) -> None:
        self._move("running")

    def reconnecting(self, reason: str) -> None:
        self._move("reconnecting", reason)

    def fail(self, reason: str) -> None:
        self._move("error", reason)

    def stop(self) -> None:
        self._move("stopped")

    def _move(self, new: State, reason: str | None = None) -> None:
        with self._lock:
            old = self._state
            if new == old or new not in _ALLOWED[old]:
                if reason is not None and old != "stopped":
                    self.last_error = reason
                return
            self._state, self._since = new, time.time()
            if reason is not None:
                self.last_error = reason
        if self._on_change is not None:
            self._on_change(old, new)

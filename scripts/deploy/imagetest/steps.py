"""Named steps: a failure says which step failed and why; every step's time is printed."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

# The steps, in the order they run. A failure names one of them.
STEPS = ("install", "base", "build", "start", "probe", "request", "limit", "drain", "self-check")


class StepFailed(Exception):
    """A check that did not hold; ``step`` is one of STEPS, ``reason`` says what was seen."""

    def __init__(self, step: str, reason: str):
        assert step in STEPS, step
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def step(name: str, doing: str = "") -> Iterator[None]:
    """Runs a block as step ``name`` (``doing`` says what, in the log): an unexpected exception inside it
    fails that step."""
    started = time.monotonic()
    log(f"{name}{': ' + doing if doing else ''} ...")
    try:
        yield
    except StepFailed:
        raise
    except Exception as error:  # any other error is this step's failure, with its message
        raise StepFailed(name, f"{type(error).__name__}: {error}") from error
    log(f"{name} ok ({time.monotonic() - started:.1f} s)")


def check(condition: bool, step_name: str, reason: str) -> None:
    if not condition:
        raise StepFailed(step_name, reason)

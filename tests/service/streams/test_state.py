"""The session state machine: allowed moves, the reason kept, stopped is final."""

from __future__ import annotations

from service.streams.state import SessionState, State


def test_moves_are_reported_and_reasons_kept() -> None:
    changes: list[tuple[State, State]] = []
    state = SessionState(on_change=lambda old, new: changes.append((old, new)))
    state.running()
    state.reconnecting("the source ended")
    state.reconnecting("timed out")  # same state: no change reported, newer reason kept
    state.running()
    state.fail("gave up")
    assert changes == [
        ("starting", "running"),
        ("running", "reconnecting"),
        ("reconnecting", "running"),
        ("running", "error"),
    ]
    assert state.value == "error" and state.last_error == "gave up"


def test_error_only_moves_to_stopped_and_stopped_is_final() -> None:
    state = SessionState()
    state.fail("broken")
    state.running()
    assert state.value == "error"
    state.stop()
    state.running()
    state.fail("later")
    assert state.value == "stopped" and state.last_error == "broken"

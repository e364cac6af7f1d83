"""The tray's state from core events, its tooltip, and the recent completions."""

from __future__ import annotations

from anyfill.daemon.bus.status import (
    DaemonStatus,
    PressFinished,
    PressStarted,
    PreviewClosed,
    PreviewShown,
    Problem,
)
from anyfill.daemon.scheduler.events import BackendMetrics, CooldownChanged
from anyfill.ui.history import History
from anyfill.ui.state import ERROR_SHOWN_S, TrayState


def metrics(backend: str, tokens: int, cost: float) -> BackendMetrics:
    return BackendMetrics(
        backend, 3, (("ok", 3),), 1.0, 80.0, 90.0, 200.0, 0, 0, 0.0, "", tokens, tokens, cost
    )


def test_the_look_follows_the_events_most_urgent_first() -> None:
    state = TrayState()
    assert state.apply(DaemonStatus(False, "paste", ("local", "cloud"), ("local", "cloud")))
    assert state.look(0) == "idle"
    state.apply(PressStarted(1, "complete"), 0)
    state.apply(PressStarted(2, "complete"), 0)
    assert state.look(0) == "working"
    assert "2 in flight" in state.tooltip(0)
    state.apply(PreviewShown(7, "Mousepad", None, "a", "b", False), 0)
    assert state.look(0) == "preview"
    state.apply(PreviewClosed(7, "accepted"), 0)
    state.apply(PressFinished("complete", "inserted", backend="local", ms=123.4, press_id=1), 0)
    state.apply(PressFinished("complete", "failed", "nothing listens", press_id=2), 10)
    assert state.look(11) == "error"
    assert "nothing listens" in state.tooltip(11)
    assert state.look(10 + ERROR_SHOWN_S + 1) == "idle"
    state.apply(CooldownChanged("local", True, 20, "429"), 50)
    assert state.look(50) == "cooling"
    state.apply(CooldownChanged("local", False), 60)
    assert state.look(60) == "idle"
    state.apply(DaemonStatus(True, "paste", ("local", "cloud")), 60)
    assert state.look(60) == "paused"


def test_the_tooltip_names_the_chain_latency_tokens_and_cost() -> None:
    state = TrayState()
    state.apply(DaemonStatus(False, "preview", ("local", "cloud")))
    state.apply(CooldownChanged("cloud", True, 5, "rate limited"))
    state.apply(PressFinished("complete", "inserted", backend="local", ms=87.0, press_id=1))
    assert not state.apply(metrics("cloud", 1500, 0.0123))  # tooltip only, no redraw
    tooltip = state.tooltip(0)
    assert "backends: local → cloud (cooling)" in tooltip
    assert "insert: preview" in tooltip
    assert "last: 87 ms (local)" in tooltip
    assert "today: 3,000 tokens, $0.0123" in tooltip


def test_a_problem_shows_as_an_error() -> None:
    state = TrayState()
    state.apply(Problem("no_display", "cannot open the X display ':9'"), 0)
    assert state.look(1) == "error"


def test_history_keeps_the_newest_first_and_only_completions() -> None:
    history = History(2)
    assert not history.add(PressFinished("complete", "failed", "x", press_id=1))
    assert not history.add(PressFinished("complete", "empty", press_id=2))
    history.add(
        PressFinished("complete", "inserted", app="Mousepad", middle="one", finished=0, press_id=3)
    )
    history.add(
        PressFinished("preview", "kept", app="Geany", middle="two\n  three", finished=0, press_id=4)
    )
    history.add(
        PressFinished("preview", "dismissed", app="xterm", middle="x" * 80, finished=0, press_id=5)
    )
    entries = history.entries()
    assert [e.middle for e in entries] == ["x" * 80, "two\n  three"]
    assert entries[1].label().endswith("Geany — two ⏎ three (not inserted: focus moved)")
    assert len(entries[0].label().split(" — ", 1)[1]) < 80
    assert History(0).add(PressFinished("complete", "inserted", middle="z", press_id=6)) is False

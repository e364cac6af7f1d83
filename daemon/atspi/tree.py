"""The one search of the accessibility tree. Runs on the session's thread only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

MAX_NODES = 400
"""AT-SPI calls are D-Bus round trips: a bounded walk keeps a huge tree from stalling."""


def applications(atspi: Any, pid: int | None = None) -> Iterator[Any]:
    """The applications on the bus (those of process ``pid`` when given)."""
    desktop = atspi.get_desktop(0)
    for index in range(desktop.get_child_count()):
        app = desktop.get_child_at_index(index)
        if app is not None and (pid is None or app.get_process_id() == pid):
            yield app


def focused_text(atspi: Any, pid: int) -> tuple[Any, Any] | None:
    """The focused node with a Text interface in process ``pid``, and its application.

    Asked of the application in one call where it has the Collection interface (GTK: a
    few ms, where walking Mousepad's tree with two windows took ~250 nodes and 100 ms
    of round trips, past the capture's wait under load); else walked, the active window
    first."""
    for app in applications(atspi, pid):
        node = _collected_focus(atspi, app)
        if node is None:
            node = next(
                (
                    found
                    for root in _windows_active_first(atspi, app)
                    if (found := find(root, lambda n: _is_focused_text(atspi, n))) is not None
                ),
                None,
            )
        if node is not None:
            return node, app
    return None


def _collected_focus(atspi: Any, app: Any) -> Any:
    if "Collection" not in app.get_interfaces():
        return None
    rule = atspi.MatchRule.new(
        atspi.StateSet.new([atspi.StateType.FOCUSED]),
        atspi.CollectionMatchType.ALL,
        {},
        atspi.CollectionMatchType.NONE,
        [],
        atspi.CollectionMatchType.NONE,
        [],
        atspi.CollectionMatchType.NONE,
        False,
    )
    try:
        matches = atspi.Collection.get_matches(
            app, rule, atspi.CollectionSortOrder.CANONICAL, 8, True
        )
    except Exception:  # noqa: BLE001 - a GLib.Error: the app does not answer it; walk instead
        return None
    return next((node for node in matches or [] if "Text" in node.get_interfaces()), None)


def _windows_active_first(atspi: Any, app: Any) -> list[Any]:
    windows = [app.get_child_at_index(i) for i in range(app.get_child_count())]
    present = [w for w in windows if w is not None]
    active = [w for w in present if w.get_state_set().contains(atspi.StateType.ACTIVE)]
    return active + [w for w in present if w not in active]


@dataclass(frozen=True)
class ActiveWindow:
    pid: int
    position: int
    """The window's index in its application: stable while the window lives."""
    app: str
    title: str


def active_window(atspi: Any) -> ActiveWindow | None:
    """The window AT-SPI reports ACTIVE, if any application has one."""
    for app in applications(atspi):
        for position in range(app.get_child_count()):
            window = app.get_child_at_index(position)
            if window is not None and window.get_state_set().contains(atspi.StateType.ACTIVE):
                return ActiveWindow(
                    int(app.get_process_id()),
                    position,
                    str(app.get_name() or ""),
                    str(window.get_name() or ""),
                )
    return None


def find(root: Any, match: Callable[[Any], bool]) -> Any:
    """Breadth-first, bounded: a huge tree cannot stall the press."""
    queue, seen = [root], 0
    while queue and seen < MAX_NODES:
        node = queue.pop(0)
        seen += 1
        if match(node):
            return node
        queue.extend(
            child
            for child in (node.get_child_at_index(i) for i in range(node.get_child_count()))
            if child is not None
        )
    return None


def _is_focused_text(atspi: Any, node: Any) -> bool:
    return bool(
        node.get_state_set().contains(atspi.StateType.FOCUSED) and "Text" in node.get_interfaces()
    )

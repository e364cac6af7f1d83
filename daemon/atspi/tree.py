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
    """The focused node with a Text interface in process ``pid``, and its application."""
    for app in applications(atspi, pid):
        node = find(app, lambda n: _is_focused_text(atspi, n))
        if node is not None:
            return node, app
    return None


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

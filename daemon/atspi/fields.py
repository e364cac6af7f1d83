"""The other text fields of the focused window: a context source (docs/context.md).

One function the capture calls with the node it already found, on the session's thread.
Password fields are never read (nor anything under one); each field gives at most
``MAX_FIELD_CHARS`` characters (its end, nearest to where the user writes); the walk is
bounded like the tree search and in time.
"""

from __future__ import annotations

import time
from typing import Any

from anyfill.daemon.atspi.text import read_field
from anyfill.daemon.atspi.tree import MAX_NODES

__all__ = ["MAX_FIELDS", "MAX_FIELD_CHARS", "window_text_fields"]

MAX_FIELDS = 8
MAX_FIELD_CHARS = 4000
_WINDOW_ROLES = ("FRAME", "WINDOW", "DIALOG", "FILE_CHOOSER")


def _window_of(atspi: Any, node: Any) -> Any:
    """The frame, window or dialog holding ``node`` (its top-level ancestor)."""
    roles = {getattr(atspi.Role, name) for name in _WINDOW_ROLES if hasattr(atspi.Role, name)}
    current = node
    for _ in range(64):
        if current.get_role() in roles:
            return current
        parent = current.get_parent()
        if parent is None or parent.get_role() == atspi.Role.APPLICATION:
            return current
        current = parent
    return current


def window_text_fields(
    atspi: Any, focused: Any, toolkit: str, *, budget_s: float = 0.15
) -> tuple[tuple[str, str], ...]:
    """(label, text) of the editable text fields in the window of ``focused``, other than
    it; password fields never. The walk stops after ``budget_s`` (a big window's tree is
    hundreds of D-Bus round trips) with what it found."""
    deadline = time.monotonic() + budget_s
    found: list[tuple[str, str]] = []
    queue, seen = [_window_of(atspi, focused)], 0
    while queue and seen < MAX_NODES and len(found) < MAX_FIELDS:
        if time.monotonic() > deadline:
            break
        node = queue.pop(0)
        seen += 1
        if node.get_role() == atspi.Role.PASSWORD_TEXT:
            continue  # nor what it holds
        editable = node.get_state_set().contains(atspi.StateType.EDITABLE)
        if node != focused and editable and "Text" in node.get_interfaces():
            text = read_field(atspi, node, toolkit).text[-MAX_FIELD_CHARS:]
            if text.strip():
                found.append((str(node.get_name() or ""), text))
        queue.extend(
            child
            for child in (node.get_child_at_index(i) for i in range(node.get_child_count()))
            if child is not None
        )
    return tuple(found)

"""The other text fields of the focused window, read over AT-SPI: a context source.

Kept apart from the capture itself (one function it calls with the nodes it already
found), so the capture's own AT-SPI code can change without touching this. Password
fields are never read; each field gives at most ``MAX_FIELD_CHARS`` characters (its end,
nearest to where the user writes), and the walk is bounded like the capture's.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_FIELDS", "MAX_FIELD_CHARS", "window_text_fields"]

MAX_FIELDS = 8
MAX_FIELD_CHARS = 4000
MAX_NODES = 400
_WINDOW_ROLES = ("FRAME", "WINDOW", "DIALOG", "FILE_CHOOSER")


def _window_of(atspi: Any, node: Any) -> Any:
    """The frame, window or dialog holding ``node`` (its top-level ancestor)."""
    roles = {getattr(atspi.Role, name) for name in _WINDOW_ROLES if hasattr(atspi.Role, name)}
    current, depth = node, 0
    while current is not None and depth < 64:
        if current.get_role() in roles:
            return current
        parent = current.get_parent()
        if parent is None or parent.get_role() == atspi.Role.APPLICATION:
            return current
        current, depth = parent, depth + 1
    return current


def window_text_fields(atspi: Any, focused: Any) -> tuple[tuple[str, str], ...]:
    """(label, text) of the text fields in the window of ``focused``, other than it: the
    editable ones and documents, password fields never."""
    window = _window_of(atspi, focused)
    found: list[tuple[str, str]] = []
    queue, seen = [window], 0
    while queue and seen < MAX_NODES and len(found) < MAX_FIELDS:
        node = queue.pop(0)
        seen += 1
        if node.get_role() == atspi.Role.PASSWORD_TEXT:
            continue  # nor its children
        text = node.get_text_iface() if node != focused else None
        states = node.get_state_set()
        if text is not None and states.contains(atspi.StateType.EDITABLE):
            count = text.get_character_count()
            content = text.get_text(max(0, count - MAX_FIELD_CHARS), count)
            if content.strip():
                found.append((node.get_name() or "", content))
        queue.extend(
            child
            for child in (node.get_child_at_index(i) for i in range(node.get_child_count()))
            if child is not None
        )
    return tuple(found)

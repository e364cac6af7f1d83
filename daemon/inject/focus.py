"""The focus guard: text goes only into the window the user pressed the hotkey in."""

from __future__ import annotations

from anyfill.daemon.desktop import Windows
from anyfill.daemon.errors import FocusChanged


def ensure_focus(windows: Windows, window_id: int) -> None:
    """Raise FocusChanged unless ``window_id`` still has the keyboard focus."""
    now = windows.focused()
    if now is None or now.window_id != window_id:
        where = f"window 0x{now.window_id:x} ({now.app or 'unknown'})" if now else "no window"
        raise FocusChanged(
            f"the focus moved from window 0x{window_id:x} to {where}; "
            "the completion was kept and not inserted"
        )

"""Guards before insertion: the same window still has the focus, and nothing got selected."""

from __future__ import annotations

from anyfill.daemon.desktop.ports import Clipboard, Windows
from anyfill.daemon.errors import FocusChanged, SelectionAppeared


def ensure_focus(windows: Windows, window_id: int) -> None:
    """Raise FocusChanged unless ``window_id`` still has the keyboard focus."""
    now = windows.focused()
    if now is None or now.window_id != window_id:
        where = f"window 0x{now.window_id:x} ({now.app or 'unknown'})" if now else "no window"
        raise FocusChanged(
            f"the focus moved from window 0x{window_id:x} to {where}; "
            "the completion was kept and not inserted"
        )


def ensure_no_new_selection(clipboard: Clipboard, window_id: int) -> None:
    """Refuse when the target selected text after the capture handed PRIMARY back.

    A paste replaces a selection: text the user selected while waiting, or a selection a
    slow application made late during capture, would be lost.
    """
    if clipboard.owned_by_program_of("primary", window_id):
        raise SelectionAppeared(
            "text became selected in the target after the capture; not pasting over it "
            "(the completion was kept)"
        )

"""What the settings panel asks the X server, each on a short-lived connection of its own.

- :func:`hotkey_is_free`: grab the combination and let go at once (X11 gives a grab to one
  client only), so the panel says while recording that another program holds it;
- :func:`open_windows` and :func:`pick_window`: the application a per-app rule should
  match, from the windows on screen or from the one the user clicks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from anyfill.daemon.desktop.hotkeys import Hotkey

__all__ = ["WindowInfo", "hotkey_is_free", "open_windows", "pick_window"]

MAX_DEPTH = 4


@dataclass(frozen=True)
class WindowInfo:
    wm_class: str
    instance: str
    title: str

    def __str__(self) -> str:
        return f"{self.wm_class} — {self.title}" if self.title else self.wm_class


def _connect(display_name: str | None) -> Any:
    try:
        from Xlib import error
        from Xlib.display import Display
    except ImportError:
        return None
    try:
        return Display(display_name)
    except (error.DisplayError, OSError, error.XauthError):
        return None


def _client(display: Any, window: Any, depth: int = 0) -> WindowInfo | None:
    """The application window at or under ``window`` (a WM frame holds the client)."""
    from Xlib import X, error

    try:
        wm_class = window.get_wm_class()
        if wm_class:
            name = window.get_full_property(
                display.intern_atom("_NET_WM_NAME"), display.intern_atom("UTF8_STRING")
            )
            title = name.value.decode("utf-8", "replace") if name is not None else ""
            return WindowInfo(wm_class[1], wm_class[0], title or (window.get_wm_name() or ""))
        if depth >= MAX_DEPTH:
            return None
        for child in reversed(window.query_tree().children):
            if child.get_attributes().map_state != X.IsViewable:
                continue
            found = _client(display, child, depth + 1)
            if found is not None:
                return found
    except error.XError:
        return None
    return None


def open_windows(display_name: str | None = None) -> list[WindowInfo]:
    """The applications with a window on screen, topmost first, each once."""
    from Xlib import X, error

    display = _connect(display_name)
    if display is None:
        return []
    try:
        found: list[WindowInfo] = []
        for child in reversed(display.screen().root.query_tree().children):
            try:
                if child.get_attributes().map_state != X.IsViewable:
                    continue
            except error.XError:
                continue
            info = _client(display, child)
            if info is not None and info not in found:
                found.append(info)
        return found
    finally:
        display.close()


def pick_window(display_name: str | None = None, timeout_s: float = 20.0) -> WindowInfo | None:
    """Wait for the user to click a window (crosshair pointer); None on a right click or
    when nothing was clicked within ``timeout_s``."""
    from Xlib import X, Xcursorfont

    display = _connect(display_name)
    if display is None:
        return None
    try:
        root = display.screen().root
        font = display.open_font("cursor")
        cursor = font.create_glyph_cursor(
            font,
            Xcursorfont.crosshair,
            Xcursorfont.crosshair + 1,
            (0, 0, 0),
            (0xFFFF, 0xFFFF, 0xFFFF),
        )
        status = root.grab_pointer(
            False,
            X.ButtonPressMask,
            X.GrabModeAsync,
            X.GrabModeAsync,
            X.NONE,
            cursor,
            X.CurrentTime,
        )
        if status != X.GrabSuccess:
            return None
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                while display.pending_events():
                    event = display.next_event()
                    if event.type == X.ButtonPress:
                        if event.detail == X.Button3:
                            return None
                        target = event.child if event.child != X.NONE else root
                        return _client(display, target)
                time.sleep(0.02)
            return None
        finally:
            display.ungrab_pointer(X.CurrentTime)
            display.sync()
    finally:
        display.close()


def hotkey_is_free(hotkey: Hotkey, display_name: str | None = None) -> bool | None:
    """True when no other client holds ``hotkey``; None when there is no X display to ask."""
    display = _connect(display_name)
    if display is None:
        return None
    from Xlib import X, error

    from anyfill.daemon.x11.keyboard import keysym_of

    try:
        keycode = int(display.keysym_to_keycode(keysym_of(hotkey.key)))
        if not keycode:
            return None
        masks = {"ctrl": X.ControlMask, "shift": X.ShiftMask, "alt": X.Mod1Mask}
        masks.update({"cmd": X.Mod4Mask, "numlock": X.Mod2Mask})
        wanted = {
            "alt": int(display.keysym_to_keycode(keysym_of("alt"))),
            "cmd": int(display.keysym_to_keycode(keysym_of("cmd"))),
            "numlock": int(display.keysym_to_keycode(keysym_of("Num_Lock"))),
        }
        for index, codes in enumerate(display.get_modifier_mapping()):
            for name, code in wanted.items():
                if code and code in codes:
                    masks[name] = 1 << index
        modifiers = 0
        for mod in hotkey.modifiers:
            modifiers |= masks[mod]
        root = display.screen().root
        catch = error.CatchError(error.BadAccess)
        variants = [0, X.LockMask, masks["numlock"], X.LockMask | masks["numlock"]]
        for extra in variants:
            root.grab_key(
                keycode, modifiers | extra, False, X.GrabModeAsync, X.GrabModeAsync, catch
            )
        display.sync()
        taken = catch.get_error() is not None
        for extra in variants:
            root.ungrab_key(keycode, modifiers | extra)
        display.sync()
        return not taken
    finally:
        display.close()

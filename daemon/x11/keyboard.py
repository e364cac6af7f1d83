"""Key events through XTEST: chords, typing short ASCII, and waiting for the user's keys."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from anyfill.daemon.desktop.hotkeys import Hotkey, parse_hotkey
from anyfill.daemon.errors import ConfigError, DesktopUnavailable
from anyfill.daemon.x11.connection import XConnection

log = logging.getLogger("anyfill.x11.keys")

# pynput-style key names -> X keysym names.
KEYSYM_NAMES: dict[str, str] = {
    "ctrl": "Control_L",
    "shift": "Shift_L",
    "alt": "Alt_L",
    "cmd": "Super_L",
    "super": "Super_L",
    "space": "space",
    "enter": "Return",
    "backspace": "BackSpace",
    "tab": "Tab",
    "esc": "Escape",
    "home": "Home",
    "end": "End",
    "insert": "Insert",
    "delete": "Delete",
    "left": "Left",
    "right": "Right",
    "up": "Up",
    "down": "Down",
    "page_up": "Prior",
    "page_down": "Next",
    **{f"f{n}": f"F{n}" for n in range(1, 25)},
}
POLL_S = 0.005


def keysym_of(name: str) -> int:
    """The X keysym of a hotkey key name (``space``, ``f5``, ``a``)."""
    from Xlib import XK

    if len(name) == 1:
        return ord(name) if 0x20 <= ord(name) <= 0x7E else 0x01000000 + ord(name)
    keysym = int(XK.string_to_keysym(KEYSYM_NAMES.get(name, name)))
    if not keysym:
        raise ConfigError(f"no X key named {name!r}", key="hotkeys")
    return keysym


class X11Keys:
    """The :class:`~anyfill.daemon.desktop.ports.Keys` port on X11 (XTEST fake input)."""

    def __init__(self, conn: XConnection) -> None:
        from Xlib import X

        self._conn = conn
        self._sending = 0
        conn.on(X.MappingNotify, self._on_mapping)

    @property
    def injecting(self) -> bool:
        return self._sending > 0

    def _on_mapping(self, event: Any) -> None:
        self._conn.display.refresh_keyboard_mapping(event)

    def keysym(self, name: str) -> int:
        return keysym_of(name)

    def keycode(self, name: str) -> int:
        keycode = int(self._conn.display.keysym_to_keycode(self.keysym(name)))
        if not keycode:
            raise DesktopUnavailable(f"the keyboard layout has no key for {name!r}")
        return keycode

    def chord_keycodes(self, hotkey: Hotkey) -> tuple[list[int], int]:
        return [self.keycode(mod) for mod in hotkey.modifiers], self.keycode(hotkey.key)

    async def press(self, chord: str) -> None:
        from Xlib import X
        from Xlib.ext import xtest

        modifiers, key = self.chord_keycodes(parse_hotkey(chord))
        display = self._conn.display
        self._sending += 1
        try:
            for code in modifiers:
                xtest.fake_input(display, X.KeyPress, code)
            xtest.fake_input(display, X.KeyPress, key)
            xtest.fake_input(display, X.KeyRelease, key)
            for code in reversed(modifiers):
                xtest.fake_input(display, X.KeyRelease, code)
            display.sync()  # the server has queued the events before we go on
        finally:
            self._sending -= 1
        self._conn.schedule_pump()

    def _plan(self, text: str) -> list[tuple[int, bool]] | None:
        """(keycode, needs shift) per character, or None if one has no plain key."""
        from Xlib import X

        caps = bool(self._conn.root.query_pointer().mask & X.LockMask)
        plan: list[tuple[int, bool]] = []
        for char in text:
            if char == "\t":
                keysym = self.keysym("tab")
            elif 0x20 <= ord(char) <= 0x7E:
                keysym = ord(char)
            else:
                return None
            found = [
                (code, index)
                for code, index in self._conn.display.keysym_to_keycodes(keysym)
                if index in (0, 1)
            ]
            if not found:
                return None
            code, index = found[0]
            shift = index == 1
            if caps and char.isalpha():
                shift = not shift
            plan.append((code, shift))
        return plan

    async def type_text(self, text: str) -> bool:
        from Xlib import X
        from Xlib.ext import xtest

        plan = self._plan(text)
        if plan is None:
            return False
        display = self._conn.display
        shift = self.keycode("shift")
        self._sending += 1
        try:
            for code, shifted in plan:
                if shifted:
                    xtest.fake_input(display, X.KeyPress, shift)
                xtest.fake_input(display, X.KeyPress, code)
                xtest.fake_input(display, X.KeyRelease, code)
                if shifted:
                    xtest.fake_input(display, X.KeyRelease, shift)
            display.sync()
        finally:
            self._sending -= 1
        self._conn.schedule_pump()
        return True

    async def wait_released(self, timeout_s: float) -> bool:
        """Poll XQueryKeymap until no key is down (the hotkey's own keys included).

        Until the hotkey's key is up our passive grab is active and would swallow the
        keys we send, and held modifiers would turn Ctrl+C into Ctrl+Alt+C.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if not any(self._conn.display.query_keymap()):
                return True
            if time.monotonic() >= deadline:
                log.warning("keys still held after %.1f s; please release them", timeout_s)
                return False
            await asyncio.sleep(POLL_S)

"""Global hotkeys on X11 with XGrabKey: only the combination is taken from the focused app."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Generic, TypeVar

from anyfill.daemon.desktop.hotkeys import Hotkey
from anyfill.daemon.errors import HotkeyTaken
from anyfill.daemon.x11.connection import XConnection
from anyfill.daemon.x11.keyboard import X11Keys

log = logging.getLogger("anyfill.x11.grab")

A = TypeVar("A", bound=str)
"""The action names: the hotkeys' actions, or the preview popup's keys."""


class X11Hotkeys(Generic[A]):
    """Grabs each hotkey on the root window, with every Caps Lock / Num Lock variant.

    The X server delivers a grabbed press only to us; the application under the caret
    never sees it. Presses while we inject keys and auto-repeat presses are ignored.
    """

    def __init__(
        self,
        conn: XConnection,
        keys: X11Keys,
        bindings: Mapping[A, Hotkey],
        on_trigger: Callable[[A], None],
        *,
        announce: bool = True,
    ) -> None:
        self._conn = conn
        self._keys = keys
        self._bindings = dict(bindings)
        self._on_trigger = on_trigger
        self._announce = logging.INFO if announce else logging.DEBUG
        self._grabs: dict[tuple[int, int], A] = {}
        self.refused: list[HotkeyTaken] = []
        """One message per combination another program holds (that action is off)."""
        self._relevant = 0
        self._lock_variants: list[int] = []
        """Caps Lock / Num Lock states grabbed along with each combination."""
        self._in_force: dict[A, tuple[Hotkey, tuple[int, int]]] = {}
        self._masks: dict[str, int] = {}
        self._last_release: dict[int, int] = {}
        self._unsubscribe: list[Callable[[], None]] = []

    def _modifier_masks(self) -> dict[str, int]:
        """Which ModN bit carries Alt, Super and Num Lock on this server's map."""
        from Xlib import X

        display = self._conn.display
        wanted = {
            "alt": self._keys.keycode("alt"),
            "cmd": self._keys.keycode("cmd"),
            "numlock": int(display.keysym_to_keycode(self._keys.keysym("Num_Lock"))),
        }
        masks = {"ctrl": X.ControlMask, "shift": X.ShiftMask, "alt": X.Mod1Mask}
        masks.update({"cmd": X.Mod4Mask, "numlock": X.Mod2Mask})
        for index, codes in enumerate(display.get_modifier_mapping()):
            for name, code in wanted.items():
                if code and code in codes:
                    masks[name] = 1 << index
        return masks

    @property
    def keycodes(self) -> frozenset[int]:
        """The key codes grabbed (without their modifiers)."""
        return frozenset(keycode for keycode, _ in self._grabs)

    async def __aenter__(self) -> X11Hotkeys[A]:
        from Xlib import X

        masks = self._modifier_masks()
        self._relevant = masks["ctrl"] | masks["shift"] | masks["alt"] | masks["cmd"]
        numlock = masks["numlock"]
        self._lock_variants = [0, X.LockMask, numlock, X.LockMask | numlock]
        self._masks = masks
        for action, hotkey in self._bindings.items():
            if not self._take(action, hotkey):
                taken = HotkeyTaken(str(hotkey), str(action))
                if action == "complete":
                    raise taken
                log.warning("%s", taken)
                self.refused.append(taken)
        self._unsubscribe = [
            self._conn.on(X.KeyPress, self._on_press),
            self._conn.on(X.KeyRelease, self._on_release),
        ]
        self._conn.flush()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        if self._conn.display is None or self._conn.lost.is_set():
            return  # the server is gone, and its grabs with it
        for keycode, modifiers in self._grabs:
            self._ungrab(keycode, modifiers)
        self._grabs.clear()
        self._in_force.clear()
        self._conn.flush()

    def _take(self, action: A, hotkey: Hotkey) -> bool:
        """Grab ``hotkey`` for ``action``; False (nothing grabbed) when another client holds it."""
        from Xlib import X, error

        if {"ctrl", "alt"} <= set(hotkey.modifiers) and hotkey.key[1:].isdigit():
            # XKB maps Ctrl+Alt+F<n> to a server action (switch VT): never delivered.
            log.warning("hotkey %s (%s) is the X server's VT switch key", hotkey, action)
        modifiers = 0
        for mod in hotkey.modifiers:
            modifiers |= self._masks[mod]
        keycode = self._keys.keycode(hotkey.key)
        catch = error.CatchError(error.BadAccess)
        for extra in self._lock_variants:
            self._conn.root.grab_key(
                keycode, modifiers | extra, False, X.GrabModeAsync, X.GrabModeAsync, catch
            )
        self._conn.display.sync()
        if catch.get_error():
            self._ungrab(keycode, modifiers)
            return False
        self._grabs[(keycode, modifiers)] = action
        self._in_force[action] = (hotkey, (keycode, modifiers))
        log.log(self._announce, "hotkey %s: %s", hotkey, action)
        return True

    def rebind(self, bindings: Mapping[A, Hotkey]) -> list[HotkeyTaken]:
        """Grab the combinations that changed and release the old ones. A new combination
        another program holds is not taken: the old one stays, and the returned list says so."""
        problems: list[HotkeyTaken] = []
        for action, hotkey in bindings.items():
            current = self._in_force.get(action)
            if current is not None and current[0] == hotkey:
                continue
            if current is not None:
                # Released first: two actions may swap combinations.
                self._grabs.pop(current[1], None)
                self._ungrab(*current[1])
                del self._in_force[action]
            if self._take(action, hotkey):
                continue
            kept = ""
            if current is not None and self._take(action, current[0]):
                kept = str(current[0])
            taken = HotkeyTaken(str(hotkey), str(action), kept)
            log.warning("%s", taken)
            problems.append(taken)
        self._conn.flush()
        return problems

    def in_force(self) -> dict[A, Hotkey]:
        """The combination each action is grabbed with now."""
        return {action: hotkey for action, (hotkey, _) in self._in_force.items()}

    def _ungrab(self, keycode: int, modifiers: int) -> None:
        for extra in self._lock_variants:
            self._conn.root.ungrab_key(keycode, modifiers | extra)

    def _on_release(self, event: Any) -> None:
        self._last_release[event.detail] = event.time

    def _on_press(self, event: Any) -> None:
        action = self._grabs.get((event.detail, event.state & self._relevant))
        if action is None:
            return
        if self._keys.injecting:
            log.debug("ignored our own key event")
            return
        if self._last_release.get(event.detail) == event.time:
            return  # auto-repeat: X sends release + press with one timestamp
        self._on_trigger(action)

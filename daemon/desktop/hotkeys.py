"""Global hotkeys: the parsed combination, the actions, and a source per platform.

On X11 the combination is grabbed with XGrabKey (:mod:`anyfill.daemon.x11.grab`), so the
focused application never receives it. macOS and Windows use pynput's listener, which
cannot suppress single keys: there the hotkey also reaches the application, so prefer a
combination that types nothing.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Literal

from anyfill.daemon.errors import ConfigError, DesktopUnavailable

log = logging.getLogger("anyfill.hotkeys")

Action = Literal["complete", "preview", "cancel"]
Trigger = Callable[[Action], None]

MODIFIERS = ("ctrl", "shift", "alt", "cmd")
_ALIASES = {
    "control": "ctrl",
    "ctrl_l": "ctrl",
    "ctrl_r": "ctrl",
    "alt_l": "alt",
    "alt_r": "alt",
    "alt_gr": "alt",
    "shift_l": "shift",
    "shift_r": "shift",
    "super": "cmd",
    "win": "cmd",
    "meta": "cmd",
    "return": "enter",
    "escape": "esc",
    "del": "delete",
    "pgup": "page_up",
    "pgdn": "page_down",
}


@dataclass(frozen=True)
class Hotkey:
    """Modifiers (from :data:`MODIFIERS`, in that order) plus one key."""

    modifiers: tuple[str, ...]
    key: str
    """A pynput-style name (``space``, ``enter``, ``f5``) or one character."""

    def __str__(self) -> str:
        parts = [f"<{mod}>" for mod in self.modifiers]
        parts.append(self.key if len(self.key) == 1 else f"<{self.key}>")
        return "+".join(parts)


def parse_hotkey(text: str) -> Hotkey:
    """Parse ``<ctrl>+<alt>+<space>`` / ``<ctrl>+<shift>+c``; modifiers may come in any order."""
    parts = [part.strip() for part in text.lower().split("+")]
    if text.endswith("++") or text == "+":
        parts = [*[p for p in parts if p], "+"]
    mods: set[str] = set()
    keys: list[str] = []
    for part in parts:
        if not part:
            raise ConfigError(f"hotkey {text!r} has an empty part", key="hotkeys")
        name = part[1:-1] if part.startswith("<") and part.endswith(">") else part
        if len(name) > 1 or part.startswith("<"):
            name = _ALIASES.get(name, name)
        if name in MODIFIERS:
            mods.add(name)
        else:
            keys.append(name)
    if len(keys) != 1:
        raise ConfigError(
            f"hotkey {text!r} needs exactly one non-modifier key (found {len(keys)})",
            key="hotkeys",
        )
    return Hotkey(tuple(mod for mod in MODIFIERS if mod in mods), keys[0])


class PynputHotkeys:
    """macOS / Windows: pynput's listener thread; callbacks only hand over to the loop.

    Events we inject ourselves carry pynput's ``injected`` flag and are ignored, as are
    presses while ``is_injecting()`` is true.
    """

    def __init__(
        self,
        bindings: Mapping[Action, Hotkey],
        on_trigger: Trigger,
        is_injecting: Callable[[], bool],
    ) -> None:
        self._bindings = dict(bindings)
        self._on_trigger = on_trigger
        self._is_injecting = is_injecting
        self._listener: Any = None

    async def __aenter__(self) -> PynputHotkeys:
        loop = asyncio.get_running_loop()
        try:
            from pynput import keyboard
        except ImportError as exc:  # pragma: no cover - platform specific
            raise DesktopUnavailable(f"global hotkeys are unavailable: {exc}") from exc
        _check_permissions(keyboard)
        hotkeys = {
            action: keyboard.HotKey(
                keyboard.HotKey.parse(str(hotkey)),
                partial(loop.call_soon_threadsafe, self._on_trigger, action),
            )
            for action, hotkey in self._bindings.items()
        }

        def on_press(key: Any, injected: bool = False) -> None:
            if injected or self._is_injecting():
                return
            for hotkey in hotkeys.values():
                hotkey.press(listener.canonical(key))

        def on_release(key: Any, injected: bool = False) -> None:
            if injected:
                return
            for hotkey in hotkeys.values():
                hotkey.release(listener.canonical(key))

        listener = keyboard.Listener(on_press=on_press, on_release=on_release)
        listener.start()
        listener.wait()
        self._listener = listener
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None


def _check_permissions(keyboard: Any) -> None:
    """macOS silently drops events without Accessibility / Input Monitoring: say so."""
    if sys.platform == "darwin" and not getattr(keyboard.Listener, "IS_TRUSTED", True):
        raise DesktopUnavailable(
            "macOS has not granted anyfill Accessibility and Input Monitoring: open System "
            "Settings > Privacy & Security, allow the program that runs anyfill, restart it"
        )


def bindings_from(complete: str, preview: str, cancel: str) -> dict[Action, Hotkey]:
    """Parse the three configured hotkeys; two actions on one combination is an error."""
    parsed: dict[Action, Hotkey] = {
        "complete": parse_hotkey(complete),
        "preview": parse_hotkey(preview),
        "cancel": parse_hotkey(cancel),
    }
    seen: dict[Hotkey, Action] = {}
    for action, hotkey in parsed.items():
        if hotkey in seen:
            raise ConfigError(
                f"hotkeys.{action} and hotkeys.{seen[hotkey]} are both {hotkey}", key="hotkeys"
            )
        seen[hotkey] = action
    return parsed

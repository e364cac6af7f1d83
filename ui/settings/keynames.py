"""Hotkeys as a desktop user reads them: ``<ctrl>+<alt>+j`` is shown as ``Ctrl+Alt+J``.

The file keeps pynput's syntax (what ``[hotkeys]`` is parsed with); only the panel's text
changes. A value that does not parse is shown as it is, so a wrong one stays recognisable.
"""

from __future__ import annotations

import re
import sys

from anyfill.daemon.desktop.hotkeys import parse_hotkey
from anyfill.daemon.errors import ConfigError

_MODIFIER_LABELS = {
    "ctrl": "Ctrl",
    "shift": "Shift",
    "alt": "Alt",
    # The "cmd" modifier is the Command key on a Mac and the Super (Windows) key elsewhere.
    "cmd": "Cmd" if sys.platform == "darwin" else "Super",
}
_KEY_LABELS = {
    "esc": "Esc",
    "page_up": "Page Up",
    "page_down": "Page Down",
    "caps_lock": "Caps Lock",
    "num_lock": "Num Lock",
    "scroll_lock": "Scroll Lock",
    "print_screen": "Print Screen",
    "+": "Plus",
}
#: A combination in pynput's syntax inside a sentence: ``<ctrl>+<alt>+<space>``, ``<ctrl>+v``.
_COMBINATION = re.compile(r"(?:<[a-z_0-9]+>\+)+(?:<[a-z_0-9]+>|[^\s<>+,;:)]|\+)")


def key_label(name: str) -> str:
    """``j`` → ``J``, ``backspace`` → ``Backspace``, ``f5`` → ``F5``, ``page_up`` → ``Page Up``."""
    if name in _KEY_LABELS:
        return _KEY_LABELS[name]
    if len(name) == 1:
        return name.upper()
    return name.replace("_", " ").title()


def hotkey_label(value: str) -> str:
    """``<ctrl>+<alt>+<backspace>`` → ``Ctrl+Alt+Backspace``; unparseable text unchanged."""
    try:
        hotkey = parse_hotkey(value)
    except ConfigError:
        return value
    if len(hotkey.key) > 1 and not re.fullmatch(r"[a-z][a-z0-9_]*", hotkey.key):
        return value  # not a key name: show what is written
    parts = [_MODIFIER_LABELS.get(mod, mod.title()) for mod in hotkey.modifiers]
    parts.append(key_label(hotkey.key))
    return "+".join(parts)


def readable_hotkeys(message: str) -> str:
    """Every combination written in pynput's syntax inside ``message``, as a user reads it."""
    return _COMBINATION.sub(lambda match: hotkey_label(match.group(0)), message)

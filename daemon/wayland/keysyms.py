"""Chords (``<ctrl>+<shift>+<home>``) as X keysyms, the names both wtype and the
RemoteDesktop portal take."""

from __future__ import annotations

from anyfill.daemon.errors import ConfigError

MODIFIERS = {
    "ctrl": ("ctrl", 0xFFE3),
    "shift": ("shift", 0xFFE1),
    "alt": ("alt", 0xFFE9),
    "cmd": ("logo", 0xFFEB),
}
"""pynput modifier name -> (wtype's -M name, keysym of its left key)."""
NAMED = {
    "enter": ("Return", 0xFF0D),
    "tab": ("Tab", 0xFF09),
    "esc": ("Escape", 0xFF1B),
    "backspace": ("BackSpace", 0xFF08),
    "delete": ("Delete", 0xFFFF),
    "insert": ("Insert", 0xFF63),
    "home": ("Home", 0xFF50),
    "end": ("End", 0xFF57),
    "left": ("Left", 0xFF51),
    "up": ("Up", 0xFF52),
    "right": ("Right", 0xFF53),
    "down": ("Down", 0xFF54),
    "page_up": ("Prior", 0xFF55),
    "page_down": ("Next", 0xFF56),
    "space": ("space", 0x20),
}
_ALIASES = {"control": "ctrl", "super": "cmd", "meta": "cmd", "return": "enter", "escape": "esc"}


def parse_chord(chord: str) -> tuple[list[str], str]:
    """``<ctrl>+v`` -> (["ctrl"], "v"): pynput-style modifier names and one key."""
    parts = [p.strip().strip("<>").lower() for p in chord.split("+") if p.strip()]
    parts = [_ALIASES.get(p, p) for p in parts]
    mods = [p for p in parts if p in MODIFIERS]
    keys = [p for p in parts if p not in MODIFIERS]
    if len(keys) != 1:
        raise ConfigError(f"key chord {chord!r} needs exactly one non-modifier key", key="insert")
    return mods, keys[0]


def key_name(key: str) -> str:
    """The XKB keysym name of one key (wtype ``-k``)."""
    if key in NAMED:
        return NAMED[key][0]
    if key.startswith("f") and key[1:].isdigit():
        return key.upper()
    return key


def keysym(key: str) -> int:
    """The keysym number of one key (RemoteDesktop ``NotifyKeyboardKeysym``)."""
    if key in NAMED:
        return NAMED[key][1]
    if key.startswith("f") and key[1:].isdigit():
        return 0xFFBE + int(key[1:]) - 1
    if len(key) == 1:
        code = ord(key)
        return code if code < 0x100 else 0x01000000 + code
    raise ConfigError(f"unknown key {key!r}", key="insert")

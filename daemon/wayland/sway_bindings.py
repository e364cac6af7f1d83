"""Key combinations in sway's ``bindsym`` syntax, and the ones a sway config binds.

The preview popup binds its keys in sway while it shows, but never one the user bound:
their config (``GET_CONFIG``) is read for ``bindsym`` lines of the default mode.
"""

from __future__ import annotations

from collections.abc import Mapping

from anyfill.daemon.desktop.hotkeys import Hotkey
from anyfill.daemon.wayland.keysyms import key_name

SWAY_MODIFIERS = {"ctrl": "Ctrl", "shift": "Shift", "alt": "Mod1", "cmd": "Mod4"}
_MODIFIER_ALIASES = {
    "control": "ctrl",
    "ctrl": "ctrl",
    "mod1": "alt",
    "alt": "alt",
    "mod4": "logo",
    "super": "logo",
    "logo": "logo",
    "shift": "shift",
}
PUNCTUATION = {
    "]": "bracketright",
    "[": "bracketleft",
    "{": "braceleft",
    "}": "braceright",
    ";": "semicolon",
    ":": "colon",
    "'": "apostrophe",
    '"': "quotedbl",
    ",": "comma",
    ".": "period",
    "/": "slash",
    "\\": "backslash",
    "-": "minus",
    "=": "equal",
    "+": "plus",
    "`": "grave",
    "<": "less",
    ">": "greater",
    "?": "question",
    "!": "exclam",
    "#": "numbersign",
    " ": "space",
}


def sway_combo(hotkey: Hotkey) -> str:
    """``<alt>+]`` -> ``Mod1+bracketright`` (sway's bindsym syntax, XKB keysym names)."""
    key = hotkey.key
    name = PUNCTUATION.get(key) or key_name(key)
    return "+".join([*(SWAY_MODIFIERS[m] for m in hotkey.modifiers), name])


def normalized(combo: str) -> frozenset[str]:
    """A combination as a set of lower-case parts with one name per modifier, so that
    ``Alt+Tab``, ``Mod1+tab`` and ``tab+mod1`` compare equal."""
    parts = [p for p in combo.lower().split("+") if p]
    return frozenset(_MODIFIER_ALIASES.get(p, p) for p in parts)


def user_bindings(config: str) -> set[frozenset[str]]:
    """The key combinations bound in the default mode of a sway config (``bindsym``
    lines and ``bindsym { ... }`` blocks, ``$variables`` expanded; ``mode`` blocks and
    ``bindcode`` are not the keys we bind)."""
    variables: dict[str, str] = {}
    blocks: list[str] = []
    found: set[frozenset[str]] = set()
    for raw in config.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "}":
            if blocks:
                blocks.pop()
            continue
        words = line.split()
        if words[0] == "set" and len(words) >= 3 and not blocks:
            variables[words[1]] = " ".join(words[2:])
            continue
        if line.endswith("{"):
            blocks.append(words[0])
            continue
        if "mode" in blocks:
            continue
        if blocks and blocks[-1] == "bindsym":
            combo = _first_combo(words)
        elif not blocks and words[0] == "bindsym":
            combo = _first_combo(words[1:])
        else:
            continue
        if combo:
            found.add(normalized(_expand(combo, variables)))
    return found


def _first_combo(words: list[str]) -> str:
    return next((w for w in words if not w.startswith("--")), "")


def _expand(text: str, variables: Mapping[str, str]) -> str:
    for name in sorted(variables, key=len, reverse=True):
        text = text.replace(name, variables[name])
    return text

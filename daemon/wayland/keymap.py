"""The XKB keymap anyfill's virtual keyboard uploads, and where each key sits on it.

The keymap is the standard US layout (what ``xkbcli compile-keymap`` builds from the
default rules: evdev keycodes, pc105, us), named by its components and compiled by the
compositor's own libxkbcommon. Chords and ASCII text go out on their usual evdev keys, so
every application sees the keys a real keyboard would send. Other characters are typed on
extra keys that each carry one character's keysym, added above the highest evdev keycode
when a character is first needed.

Why not a keymap of only the keys in use (what wtype builds): GTK 3 on Wayland looks keys
up for its key bindings over ``min_keycode <= keycode < max_keycode`` (gdkkeys-wayland.c),
so it never finds the key on a keymap's highest keycode. With one key per keysym, Ctrl+V's
``v`` is that key and GTK ignores the chord (text still arrives: GTK's input method takes
the keysym). Here the highest keycode is always a spare key with no symbol.
"""

from __future__ import annotations

from anyfill.daemon.errors import ConfigError, InsertError
from anyfill.daemon.wayland.keysyms import keysym

FORMAT_XKB_V1 = 1
"""``wl_keyboard.keymap_format.xkb_v1``."""
EVDEV_OFFSET = 8
"""XKB keycode = evdev code + 8 (the evdev keycodes file)."""
FIRST_EXTRA = 1024
"""Extra keys start above every keycode of xkeyboard-config's evdev file (708 at most)."""
MAX_EXTRAS = 512
"""More distinct characters than this and the extra keys are reassigned from scratch."""

# Linux input-event-codes.h, the keys of a US pc105 keyboard that chords use.
_LETTERS = dict(zip("qwertyuiop", range(16, 26), strict=True))
_LETTERS |= dict(zip("asdfghjkl", range(30, 39), strict=True))
_LETTERS |= dict(zip("zxcvbnm", range(44, 51), strict=True))
_DIGITS = dict(zip("1234567890", range(2, 12), strict=True))
_PUNCTUATION = {
    "-": 12, "=": 13, "[": 26, "]": 27, ";": 39, "'": 40, "`": 41, "\\": 43,
    ",": 51, ".": 52, "/": 53,
}  # fmt: skip
_NAMED = {
    "esc": 1, "backspace": 14, "tab": 15, "enter": 28, "space": 57,
    "home": 102, "up": 103, "page_up": 104, "left": 105, "right": 106, "end": 107,
    "down": 108, "page_down": 109, "insert": 110, "delete": 111,
}  # fmt: skip
_FUNCTION = {f"f{n}": code for n, code in zip(range(1, 11), range(59, 69), strict=True)}
_FUNCTION |= {"f11": 87, "f12": 88}
_FUNCTION |= {f"f{n}": code for n, code in zip(range(13, 25), range(183, 195), strict=True)}
EVDEV_KEYS = _LETTERS | _DIGITS | _PUNCTUATION | _NAMED | _FUNCTION
"""Chord key name (lower case, as ``parse_chord`` gives it) -> evdev code."""

MODIFIER_KEYS = {"ctrl": 29, "shift": 42, "alt": 56, "cmd": 125}
"""The left key of each modifier -> evdev code."""
MODIFIER_MASKS = {"ctrl": 1 << 2, "shift": 1 << 0, "alt": 1 << 3, "cmd": 1 << 6}
"""Each modifier's bit in the keymap's modifier state: XKB's real modifiers keep fixed
indices (Shift 0, Lock 1, Control 2, Mod1 3 ... Mod5 7) and the pc symbols put Alt on Mod1
and Super on Mod4."""

_SHIFTED = dict(zip('~!@#$%^&*()_+{}|:"<>?', "`1234567890-=[]\\;',./", strict=True))
TEXT_KEYS: dict[str, tuple[int, bool]] = {
    **{c: (code, False) for c, code in (_LETTERS | _DIGITS | _PUNCTUATION).items()},
    **{c.upper(): (code, True) for c, code in _LETTERS.items()},
    **{shifted: ((_DIGITS | _PUNCTUATION)[plain], True) for shifted, plain in _SHIFTED.items()},
    " ": (57, False),
    "\n": (28, False),
    "\t": (15, False),
}
"""Characters typed on their US key (with Shift or not) rather than on an extra key: what
Xwayland windows can receive too (X clients see no keycode above 255)."""


class Keymap:
    """The uploaded keymap: the base layout plus the extra keys assigned so far."""

    def __init__(self) -> None:
        self._extras: dict[str, int] = {}

    def text(self) -> str:
        names = [(f"<AF{n:03X}>", FIRST_EXTRA + n) for n in range(len(self._extras) + 1)]
        keycodes = "".join(f"        {name} = {code};\n" for name, code in names)
        symbols = "".join(
            f"        key {names[n][0]} {{ [ {_keysym_of(char):#x} ] }};\n"
            for char, n in self._extras.items()
        )
        # The last extra name has no symbols: the spare highest keycode (module docstring).
        return (
            "xkb_keymap {\n"
            '    xkb_keycodes "anyfill" {\n'
            '        include "evdev+aliases(qwerty)"\n' + keycodes + "    };\n"
            '    xkb_types "anyfill" { include "complete" };\n'
            '    xkb_compatibility "anyfill" { include "complete" };\n'
            '    xkb_symbols "anyfill" {\n'
            '        include "pc+us+inet(evdev)"\n' + symbols + "    };\n"
            "};\n"
        )

    def add(self, text: str) -> bool:
        """Give every character of ``text`` a key; True when the keymap changed (upload it
        again before typing)."""
        missing = [c for c in dict.fromkeys(text) if c not in TEXT_KEYS and c not in self._extras]
        for char in missing:
            _keysym_of(char)  # refuse control characters before anything is sent
        if not missing:
            return False
        if len(self._extras) + len(missing) > MAX_EXTRAS:
            self._extras = {}
            missing = [c for c in dict.fromkeys(text) if c not in TEXT_KEYS]
        for char in missing:
            self._extras[char] = len(self._extras)
        return True

    def text_key(self, char: str) -> tuple[int, bool]:
        """The evdev code that types ``char`` (after :meth:`add`), and whether with Shift."""
        if char in TEXT_KEYS:
            return TEXT_KEYS[char]
        return FIRST_EXTRA + self._extras[char] - EVDEV_OFFSET, False

    def chord_key(self, key: str) -> int | None:
        """The evdev code of a chord's key on the base layout; None when the layout has none
        (then it is typed on an extra key, see :meth:`add`)."""
        return EVDEV_KEYS.get(key)


def _keysym_of(char: str) -> int:
    code = ord(char)
    if code < 0x20 or 0x7F <= code < 0xA0:
        raise InsertError(f"cannot type the control character U+{code:04X}")
    try:
        return keysym(char)
    except ConfigError as exc:
        raise InsertError(str(exc)) from exc

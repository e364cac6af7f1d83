"""How a completion goes in: typed as key events or pasted (espanso's Auto rule, stricter).

Typing is for short single-line ASCII only: key events for non-ASCII characters depend on
remapping tricks that go wrong (pynput#642), and a typed newline triggers auto-indent and
completion popups in editors. Everything else is pasted.
"""

from __future__ import annotations

from typing import Literal

from anyfill.config.model import InsertMode

Method = Literal["paste", "type"]
TYPE_MODE_MAX_CHARS = 500
"""In ``mode = "type"`` longer text is pasted anyway: typing it would take seconds."""


def typeable(text: str) -> bool:
    return text.isascii() and "\n" not in text and "\r" not in text


def choose(mode: InsertMode, text: str, type_max_chars: int) -> tuple[Method, str]:
    """The method for ``text`` and, when it differs from what the mode asks, why."""
    if mode == "preview":
        return "paste", "no preview window in headless mode; pasting instead"
    if mode == "type":
        if not typeable(text):
            return "paste", "non-ASCII or multi-line text is pasted, not typed"
        if len(text) > TYPE_MODE_MAX_CHARS:
            return "paste", f"text over {TYPE_MODE_MAX_CHARS} characters is pasted, not typed"
        return "type", ""
    if type_max_chars and len(text) <= type_max_chars and typeable(text):
        return "type", ""
    return "paste", ""

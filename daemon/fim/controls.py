"""Characters that never go into a document from a model's answer: terminal escapes and
other C0/C1 controls, DEL, bidirectional overrides (which make code read differently from
how it runs, CVE-2021-42574 "Trojan Source") and the Unicode line/paragraph separators.

One place for every path: HTTP backends and worker pools both end in
:func:`~anyfill.daemon.fim.postprocess.clean`. A character the document itself holds is
the user's own and stays (a file that contains ESC may be completed with ESC).
"""

from __future__ import annotations

import re

__all__ = ["strip_controls"]

_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""Tab and line feed are text; a CR stays only before a line feed (a CRLF document)."""


def strip_controls(text: str, document: str = "") -> str:
    """``text`` without control characters, except those ``document`` contains."""
    if text.isascii() and text.isprintable():
        return text  # the common case, without a regex pass
    kept = frozenset(ch for ch in set(_CONTROLS.findall(document)))

    def drop(match: re.Match[str]) -> str:
        ch = match.group()
        if ch in kept:
            return ch
        if ch == "\r" and text.startswith("\n", match.end()):
            return ch
        return ""

    return _CONTROLS.sub(drop, text)

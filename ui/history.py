"""Recent completions for the tray menu: what was completed, in which app, when.

Only the completion itself (the middle) is kept, never the captured text around it, so
the menu shows nothing the user did not already get from anyfill.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from anyfill.daemon.bus.status import PressFinished

LABEL_CHARS = 48
_KEPT = ("inserted", "sent", "clipboard", "kept", "dismissed")


@dataclass(frozen=True)
class Entry:
    middle: str
    app: str
    at: float
    status: str
    backend: str

    def label(self) -> str:
        when = time.strftime("%H:%M", time.localtime(self.at))
        text = " ⏎ ".join(line.strip() for line in self.middle.strip("\n").split("\n"))
        if len(text) > LABEL_CHARS:
            text = text[: LABEL_CHARS - 1] + "…"
        note = {"kept": " (not inserted: focus moved)", "dismissed": " (dismissed)"}
        return f"{when}  {self.app or '?'} — {text}{note.get(self.status, '')}"


class History:
    """The newest completions first, at most ``size``."""

    def __init__(self, size: int) -> None:
        self._entries: deque[Entry] = deque(maxlen=max(size, 1))
        self.enabled = size > 0

    def add(self, event: PressFinished) -> bool:
        if not self.enabled or not event.middle or event.status not in _KEPT:
            return False
        self._entries.appendleft(
            Entry(
                event.middle, event.app, event.finished or time.time(), event.status, event.backend
            )
        )
        return True

    def entries(self) -> list[Entry]:
        return list(self._entries)

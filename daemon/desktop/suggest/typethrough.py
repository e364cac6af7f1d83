"""Type-through: while the user types the first characters of the suggestion shown, the
rest keeps showing without a new request (Copilot's, Cotabby's behaviour)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    """A suggestion on screen: the caret offset it was made for and its text."""

    offset: int
    middle: str


class TypeThrough:
    def __init__(self) -> None:
        self.shown: Shown | None = None

    def show(self, offset: int, middle: str) -> None:
        self.shown = Shown(offset, middle) if middle else None

    def clear(self) -> None:
        self.shown = None

    def completes(self, offset: int, text: str) -> bool:
        """``text`` at ``offset`` is the whole suggestion on screen: it was accepted (Tab's
        paste, whose event comes after the keys under load) or typed to its end. It is
        forgotten; nothing of it is left to show."""
        shown = self.shown
        if shown is None or (offset, text) != (shown.offset, shown.middle):
            return False
        self.shown = None
        return True

    def typed(self, offset: int, text: str) -> Shown | None:
        """The user inserted ``text`` at ``offset``: the rest of the suggestion (at the caret
        after it) when it begins with what was typed, else None (and it is forgotten)."""
        shown, self.shown = self.shown, None
        if shown is None or offset != shown.offset or not text:
            return None
        if not shown.middle.startswith(text) or len(text) >= len(shown.middle):
            return None
        self.shown = Shown(offset + len(text), shown.middle[len(text) :])
        return self.shown

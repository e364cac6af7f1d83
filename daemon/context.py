"""What anyfill knows about the place a completion goes: the text around the caret."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CaptureMethod = Literal["accessibility", "keyboard", "clipboard", "cli", "mqtt", "test"]


@dataclass(frozen=True)
class CaretRect:
    """The caret's rectangle in screen pixels, when the platform tells."""

    x: int
    y: int
    width: int
    height: int


@dataclass(frozen=True)
class ScreenArea:
    """One output (monitor) in the desktop's coordinates, and its name where the platform
    names it (Wayland: the compositor's output name, as in ``swaymsg -t get_outputs``)."""

    name: str
    x: int
    y: int
    width: int
    height: int


@dataclass(frozen=True)
class Context:
    """Text before and after the caret plus where it came from.

    ``window_id`` and ``app`` identify the target so insertion can refuse a window that
    lost focus, and so a newer request for the same target supersedes an older one.
    """

    prefix: str
    suffix: str
    app: str = ""
    window_id: int | None = None
    caret: CaretRect | None = None
    method: CaptureMethod = "cli"
    language: str = ""
    filename: str = ""
    extra: tuple[tuple[str, str], ...] = field(default=())
    """Other files as (filename, text) pairs, for servers that take repository context."""
    fields: tuple[tuple[str, str], ...] = field(default=())
    """The window's other text fields as (label, text), as the capture read them; the
    context sources turn what may be sent into ``extra`` and drop these."""

    @property
    def target(self) -> str:
        """A key naming the text field: requests for the same target supersede each other."""
        if self.window_id is not None:
            return f"{self.app}:{self.window_id}"
        return self.app or "default"

"""The ports between the desktop path's logic and a platform: keys, clipboard, windows.

Capture strategies, insertion and the pipeline only talk to these protocols; the X11
implementation lives in :mod:`anyfill.daemon.x11`. Other platforms plug in here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from anyfill.daemon.hotkeys import Action, Hotkey

Which = Literal["clipboard", "primary"]
"""``primary`` is X11's middle-click selection; platforms without one ignore it."""

Value = bytes | tuple[int, ...]


@dataclass(frozen=True)
class ClipSnapshot:
    """Everything a clipboard owner offered: format name -> (type name, bits, data).

    ``items`` empty means the clipboard had no owner; restoring then clears it.
    """

    items: dict[str, tuple[str, int, Value]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.items

    def text(self) -> str | None:
        for target in ("UTF8_STRING", "text/plain;charset=utf-8", "text/plain", "TEXT", "STRING"):
            item = self.items.get(target)
            if item is not None and isinstance(item[2], bytes):
                return item[2].decode("latin-1" if target == "STRING" else "utf-8", "replace")
        return None

    @classmethod
    def from_text(cls, text: str) -> ClipSnapshot:
        data = text.encode("utf-8")
        items: dict[str, tuple[str, int, Value]] = {
            "UTF8_STRING": ("UTF8_STRING", 8, data),
            "text/plain;charset=utf-8": ("text/plain;charset=utf-8", 8, data),
            "text/plain": ("text/plain", 8, data),
            "TEXT": ("UTF8_STRING", 8, data),
        }
        # STRING is Latin-1 only; clients that can read Unicode ask for UTF8_STRING.
        with contextlib.suppress(UnicodeEncodeError):
            items["STRING"] = ("STRING", 8, text.encode("latin-1"))
        return cls(items)


@dataclass
class Offer:
    """Our ownership of a clipboard: who fetched it, and whether someone took it over."""

    snapshot: ClipSnapshot
    stamp: int = 0
    """The platform's timestamp of the ownership (X server time), for ``restore``."""
    fetches: int = 0
    fetched: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on every data fetch; waiters clear it to see the next one."""
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    """Another program became the owner (the user or an application copied)."""

    def note_fetch(self) -> None:
        self.fetches += 1
        self.fetched.set()


@dataclass(frozen=True)
class Target:
    """The focused window the user pressed the hotkey in."""

    window_id: int
    app: str = ""
    """Window class (X11 WM_CLASS class part), the name app rules match first."""
    instance: str = ""
    process: str = ""
    title: str = ""
    pid: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name an app rule may match: class, instance, process."""
        return tuple(name for name in (self.app, self.instance, self.process) if name)


class Keys(Protocol):
    @property
    def injecting(self) -> bool:
        """True while we send key events (hotkey sources ignore those)."""
        ...

    async def press(self, chord: str) -> None:
        """Press and release a chord written like ``<ctrl>+<shift>+<home>``."""
        ...

    async def type_text(self, text: str) -> bool:
        """Type ``text`` as key events; False, with nothing sent, when a character has no
        key on the current layout."""
        ...

    async def wait_released(self, timeout_s: float) -> bool:
        """Wait until the user let go of every key; False when the wait timed out."""
        ...


class Clipboard(Protocol):
    async def snapshot(self, which: Which) -> ClipSnapshot: ...

    async def offer(self, which: Which, snapshot: ClipSnapshot, reader: int | None = None) -> Offer:
        """Become the owner of ``which`` serving ``snapshot`` until someone else copies.

        With ``reader`` (a window id) only fetches by the program owning that window
        count in ``Offer.fetched``: clipboard managers read every new clipboard too.
        """
        ...

    async def restore(
        self, which: Which, snapshot: ClipSnapshot, as_of: Offer | None = None
    ) -> None:
        """Put ``snapshot`` back (an empty one clears the clipboard).

        ``as_of``: restore as of the moment that offer was made, so that any program
        that took the selection after it, even late, stays the owner and stays visible
        (an application that handles our select keys late claims PRIMARY late).
        """
        ...

    async def read_text(self, which: Which, timeout_s: float) -> str | None: ...

    async def reclaim(self, which: Which, window_id: int) -> bool:
        """If the program owning ``window_id`` took ``which`` from our last offer, offer
        that content again (a copy key we sent, handled late, replaced the user's data)."""
        ...

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        """True when the program owning ``window_id`` currently owns ``which``."""
        ...


class Windows(Protocol):
    def focused(self) -> Target | None: ...

    def is_password_field(self, target: Target) -> bool | None:
        """True/False where the platform can tell (accessibility), else None."""
        ...


class HotkeyGrabs(Protocol):
    def rebind(self, bindings: Mapping[Action, Hotkey]) -> list[str]:
        """Take the changed combinations, release the old ones; a taken new combination
        keeps the old one. Returns a sentence per combination that could not be taken."""
        ...

    def in_force(self) -> dict[Action, Hotkey]: ...


class DirectInsert(Protocol):
    """Insertion that needs neither keys nor the clipboard (an accessibility API)."""

    name: str

    async def insert(self, text: str, target: Target, guard: Callable[[], None]) -> bool:
        """Insert ``text`` at the caret of ``target`` and verify it landed by reading back.

        False, with the document unchanged, where this target does not take it (the caller
        then pastes). ``guard`` runs right before the change and may refuse by raising.
        """
        ...


@dataclass(frozen=True)
class Desktop:
    keys: Keys
    clipboard: Clipboard
    windows: Windows
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the connection to the display broke: the daemon cannot go on."""
    hotkeys: HotkeyGrabs | None = None
    """The live hotkey grabs, when the platform can change them while running."""
    direct: DirectInsert | None = None
    """Tried before any paste where the platform has it (Wayland: AT-SPI EditableText)."""

"""The ports between the desktop path's logic and a platform: keys, clipboard, windows.

Capture strategies, insertion and the pipeline only talk to these protocols; the X11
implementation lives in :mod:`anyfill.daemon.x11`. Other platforms plug in here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from anyfill.daemon.errors import ClipboardUnreadable, HotkeyTaken

if TYPE_CHECKING:
    from anyfill.daemon.context import CaretRect, ScreenArea
    from anyfill.daemon.desktop.hotkeys import Action, Hotkey

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


def saved_or_refused(
    which: Which, offered: int, snapshot: ClipSnapshot, *, unread: Sequence[str] = ()
) -> ClipSnapshot:
    """``snapshot`` of a selection whose owner offered ``offered`` formats; raises
    ClipboardUnreadable when it offered some and none could be saved, or when ``unread``
    names formats it offered that could not be read within the time and size limits (an
    owner too slow or too big to answer): restoring a partial clipboard would lose the
    rest, the user's text among it, so the press stops before the clipboard is taken."""
    if offered and snapshot.empty:
        raise ClipboardUnreadable(
            f"could not save the {which} selection ({offered} formats offered, none read in"
            " time); nothing was changed, so that it is not lost"
        )
    if unread:
        names = ", ".join(unread[:3]) + (f" and {len(unread) - 3} more" if len(unread) > 3 else "")
        raise ClipboardUnreadable(
            f"could not save all of the {which} selection ({len(unread)} of {offered} formats"
            f" not read within the limits: {names}); nothing was changed, so that it is not"
            " lost"
        )
    return snapshot


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
    requests: int = 0
    """Every request by the reader, TARGETS included: Chromium asks for TARGETS dozens of
    times between its two reads of a paste, so a silence in data fetches is not the end."""
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on every request by the reader (data or not); waiters clear it."""
    veto: Callable[[], bool] | None = None
    """Asked before each data read by the reader: True refuses it (the target selected
    text since the paste keys, so a paste would replace that text)."""
    refused: asyncio.Event = field(default_factory=asyncio.Event)
    """A read was refused by ``veto``."""

    def note_fetch(self) -> None:
        self.fetches += 1
        self.fetched.set()

    def note_request(self) -> None:
        self.requests += 1
        self.asked.set()

    def allows_read(self) -> bool:
        """Whether the reader may have the data now (``veto`` says no, once for good)."""
        if self.refused.is_set() or (self.veto is not None and self.veto()):
            self.refused.set()
            return False
        return True


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
    relays_input: bool = False
    """The program hands its windows' input to helper processes (Chromium's and
    Electron's renderers, Firefox's content processes): its answer to a ping shows that
    it read our keys, not that the process behind the text field handled them."""

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
        self,
        which: Which,
        snapshot: ClipSnapshot,
        reader: int | None = None,
        as_of: Offer | None = None,
    ) -> Offer | None:
        """Put ``snapshot`` back (an empty one clears the clipboard).

        Returns our new ownership (None when the snapshot was empty, or the platform kept a
        newer owner), so that fetches of the restored content by ``reader`` show.

        ``as_of``: restore as of the moment that offer was made. X ignores a claim older
        than the last change, and applications claim with the time of the key event that
        caused it: restored "now", a late claim caused by our keys would be silently
        dropped by the server (the app then believes it owns the selection, and we cannot
        see it); restored as of our own claim before the keys, it wins and shows.
        """
        ...

    async def read_text(self, which: Which, timeout_s: float) -> str | None: ...

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        """True when the program owning ``window_id`` currently owns ``which``."""
        ...

    def holder(self, which: Which) -> Literal["us", "nobody", "other"]:
        """Who owns ``which`` now: we (an offer or a restored snapshot), nobody, another."""
        ...


class Windows(Protocol):
    def focused(self) -> Target | None: ...

    def is_password_field(self, target: Target) -> bool | None:
        """True/False where the platform can tell (accessibility), else None."""
        ...

    async def ping(self, window_id: int, timeout_s: float) -> bool | None:
        """Wait until the program of ``window_id`` has handled every input event sent to
        it so far (a focus change, keys): True once it showed that, False when it did not
        within ``timeout_s``, None at once where the window or platform cannot tell."""
        ...

    async def watch_paints(self, window_id: int) -> Paints | None:
        """Start noting when the window is drawn again; None where the platform cannot
        tell (see :class:`Paints`)."""
        ...


class Paints(Protocol):
    """The redraws of one window from the moment the watch began (X11: DAMAGE).

    A program whose input goes to a helper process (see ``Target.relays_input``) draws
    nothing while that process is frozen, not even a caret's blink; once it thaws it
    handles the input waiting for it before it draws again."""

    async def drawn(self, timeout_s: float) -> bool:
        """Wait until the window was drawn after the watch began; False on timeout."""
        ...

    def close(self) -> None:
        """Stop watching (idempotent)."""
        ...


class PreviewInput(Protocol):
    """What a preview popup needs of the desktop: its keys, and the user's activity."""

    async def grab_keys(
        self, bindings: Mapping[str, Hotkey], on_key: Callable[[str], None]
    ) -> frozenset[int]:
        """Take these keys from every application until :meth:`release_keys`; returns the
        platform key codes they (and the modifiers) use, which :meth:`watch_activity`
        reports too."""
        ...

    async def release_keys(self) -> None: ...

    def watch_activity(self, on_activity: Callable[[str, int], None]) -> Callable[[], None]:
        """Report every key press ("key", code) and click ("click", button) anywhere,
        whoever has the focus, and focus changes ("focus", window id) where the platform
        tells them as they happen; returns the function that stops watching."""
        ...

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        """The caret in desktop coordinates (the capture's may be window-relative, as on
        Wayland), and the output the target is on where the platform names it."""
        ...

    @property
    def refused_keys(self) -> dict[str, str]:
        """Popup keys (binding name -> why) the last :meth:`grab_keys` could not take."""
        ...


class HotkeyGrabs(Protocol):
    def rebind(self, bindings: Mapping[Action, Hotkey]) -> list[HotkeyTaken]:
        """Take the changed combinations, release the old ones; a taken new combination
        keeps the old one. Returns one error per combination that could not be taken."""
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
    preview_input: PreviewInput | None = None
    """None where the platform cannot grab the popup keys (then no preview popup)."""
    problems: list[HotkeyTaken] = field(default_factory=list)
    """What the user should fix that did not stop the desktop (a hotkey another program
    holds); the daemon announces each on the bus."""
    hotkeys: HotkeyGrabs | None = None
    """The live hotkey grabs, when the platform can change them while running."""
    direct: DirectInsert | None = None
    """Tried before any paste where the platform has it (Wayland: AT-SPI EditableText)."""

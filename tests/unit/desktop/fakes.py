"""Doubles of the desktop ports (keys, clipboard, windows) and of the Completer protocol.

They stand at the platform boundary so the pipeline's own logic runs for real: the fake
"application" fetches the clipboard when it receives the paste keys, as X11 apps do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from anyfill.daemon.backends.base import Plan
from anyfill.daemon.completion import Completion, CompletionRequest
from anyfill.daemon.desktop.capture.timings import AppTimings
from anyfill.daemon.desktop.inject.paste import Pasted, paste
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Offer, Paints, Target, Which


class FakeClipboard:
    def __init__(self, user_text: str = "user clipboard") -> None:
        self.data: dict[Which, ClipSnapshot] = {
            "clipboard": ClipSnapshot.from_text(user_text),
            "primary": ClipSnapshot(),
        }
        self.offers: dict[Which, Offer] = {}
        self.app_owns: set[Which] = set()
        """Selections the target application owns now."""
        self.clock = 0
        """The X server's time, one tick per ownership change."""
        self.changed: dict[Which, int] = {}
        """Per selection, the time of its last ownership change."""
        self.unreadable: set[Which] = set()
        """Selections whose owner does not answer a read in time (a busy app)."""

    @property
    def app_owns_primary(self) -> bool:
        return "primary" in self.app_owns

    @app_owns_primary.setter
    def app_owns_primary(self, value: bool) -> None:
        if value:
            self.app_owns.add("primary")
        else:
            self.app_owns.discard("primary")

    def app_claims(self, which: Which, text: str, at: int | None = None) -> None:
        """The target application takes ``which`` (a copy or a selection of ``text``);
        ``at``: the time of the key that caused it, as X applications claim. Like the X
        server, a claim older than the last change is dropped."""
        if at is not None and at < self.changed.get(which, 0):
            return
        self.clock += 1
        self.changed[which] = self.clock
        offer = self.offers.pop(which, None)
        if offer is not None:
            offer.lost.set()
        self.data[which] = ClipSnapshot.from_text(text)
        self.app_owns.add(which)

    async def snapshot(self, which: Which) -> ClipSnapshot:
        return self.data[which]

    async def offer(self, which: Which, snapshot: ClipSnapshot, reader: int | None = None) -> Offer:
        if which in self.offers:
            self.offers[which].lost.set()
        self.app_owns.discard(which)
        self.clock += 1
        self.changed[which] = self.clock
        self.data[which] = snapshot
        self.offers[which] = Offer(snapshot)
        return self.offers[which]

    async def restore(
        self,
        which: Which,
        snapshot: ClipSnapshot,
        reader: int | None = None,
        as_of: Offer | None = None,
    ) -> Offer | None:
        if which in self.app_owns and as_of is not None:
            return None  # the app's claim after our offer is newer: it stays
        return await self.offer(which, snapshot)

    def current_offer(self, which: Which) -> Offer | None:
        return self.offers.get(which)

    def app_reads_offer(self) -> str | None:
        """The target pasting our CLIPBOARD offer: it asks, then reads what is allowed
        (None when the read is refused)."""
        offer = self.current_offer("clipboard")
        assert offer is not None
        offer.note_request()
        if not offer.allows_read():
            return None
        offer.note_fetch()
        return offer.snapshot.text() or ""

    async def read_text(self, which: Which, timeout_s: float) -> str | None:
        if which in self.unreadable and which in self.app_owns:
            await asyncio.sleep(timeout_s)
            return None
        return self.data[which].text()

    def holder(self, which: Which) -> Literal["us", "nobody", "other"]:
        if which in self.app_owns:
            return "other"
        return "us" if which in self.offers and not self.data[which].empty else "nobody"

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        return which in self.app_owns


class FakeKeys:
    def __init__(self, clipboard: FakeClipboard, paste_keys: str = "<ctrl>+v") -> None:
        self.clipboard = clipboard
        self.paste_keys = paste_keys
        self.pressed: list[str] = []
        self.typed: list[str] = []
        self.pasted: list[str] = []
        self.on_paste: Callable[[], None] | None = None
        """Replaces the default paste behaviour (one read at once) of the fake app."""
        self.on_key: Callable[[str], None] | None = None
        """A fake application's reaction to every other chord."""
        self.layout_lacks: set[str] = set()
        """Characters the fake keyboard layout has no key for (besides non-ASCII)."""

    @property
    def injecting(self) -> bool:
        return False

    async def press(self, chord: str) -> None:
        self.pressed.append(chord)
        offer = self.clipboard.current_offer("clipboard")
        if chord != self.paste_keys and self.on_key is not None:
            self.on_key(chord)
        elif chord == self.paste_keys and self.on_paste is not None:
            self.on_paste()
        elif chord == self.paste_keys and offer is not None:
            offer.note_request()
            if offer.allows_read():
                self.pasted.append(offer.snapshot.text() or "")
                offer.note_fetch()  # the application reads what it pastes

    async def type_text(self, text: str) -> bool:
        if not text.isascii() or any(char in self.layout_lacks for char in text):
            return False  # as a layout without keys for these characters answers
        self.typed.append(text)
        return True

    async def wait_released(self, timeout_s: float) -> bool:
        return True


class FakeWindows:
    def __init__(self, target: Target) -> None:
        self.target: Target | None = target
        self.pings: list[int] = []

    def focused(self) -> Target | None:
        return self.target

    def is_password_field(self, target: Target) -> bool | None:
        return None

    async def ping(self, window_id: int, timeout_s: float) -> bool | None:
        self.pings.append(window_id)
        return None  # as a window that does not list the ping

    async def watch_paints(self, window_id: int) -> Paints | None:
        return None  # as a platform that cannot tell


def fake_desktop(target: Target) -> tuple[Desktop, FakeKeys, FakeClipboard, FakeWindows]:
    clipboard = FakeClipboard()
    keys = FakeKeys(clipboard)
    windows = FakeWindows(target)
    return Desktop(keys, clipboard, windows), keys, clipboard, windows


async def paste_big(
    desktop: Desktop,
    target: Target,
    *,
    restore_timeout_s: float = 1.5,
    timings: AppTimings | None = None,
    veto: Callable[[], bool] | None = None,
) -> Pasted:
    """The paste the tests make: "big " by Ctrl+V into ``target``, the user's clipboard
    restored after, no focus guard."""
    return await paste(
        desktop,
        "big ",
        "<ctrl>+v",
        restore=True,
        restore_timeout_s=restore_timeout_s,
        guard=lambda: None,
        reader=target.window_id,
        app=target.app,
        timings=timings,
        veto=veto,
    )


@dataclass
class FakeCompleter:
    """Answers ``middle``; with ``gate`` set, waits for it first (a slow backend)."""

    middle: str = "big "
    gate: asyncio.Event | None = None
    on_request: Callable[[CompletionRequest], None] | None = None
    requests: list[CompletionRequest] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    async def complete(
        self, request: CompletionRequest, on_text: Callable[[str], None] | None = None
    ) -> Completion:
        self.requests.append(request)
        if self.on_request is not None:
            self.on_request(request)
        if self.gate is not None:
            await self.gate.wait()
        return Completion(request.id, self.middle, self.middle, "fake", Plan("native"), 1.0)

    async def cancel(self, request_id: str) -> bool:
        self.cancelled.append(request_id)
        return True

"""Pings after the capture keys: whether the app has handled them, and in what order.

A ping (see Windows.ping) goes to the app right after each side's select and copy keys.
GTK and Qt handle our keys, claim the selection they make and answer the ping in that
order; Chromium claims from its renderer after its browser process answered. Each side
that was answered tells which kind the app is (AppTimings.note_order); in an app of the
first kind an answer with no claim proves the side empty.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from anyfill.daemon.desktop.capture.timings import AppTimings
from anyfill.daemon.desktop.ports import Target, Windows

PING_TIMEOUT_S = 2.0
"""How long each ping waits for its answer (in the background once the side is done)."""
_PINGS_WAITING: set[asyncio.Task[bool | None]] = set()
"""Pings still waiting (a reference keeps each task alive until it ends)."""


class OrderProbe:
    """A ping sent right after one side's keys, and what it shows of the app's order.

    GTK and Qt handle our keys, claim the selection they make and answer the ping in that
    order, so an answer with no claim proves the side empty. Chromium claims from its
    renderer, after its browser process answered; an input method may handle keys late.
    Each side that was answered tells which kind the app is (see AppTimings.note_order).
    """

    def __init__(self, windows: Windows, target: Target, timings: AppTimings) -> None:
        self.answered = asyncio.Event()
        """Set once the app answered (both pings)."""
        self.finished = asyncio.Event()
        """Set once the pings ended, answered or not (at once when none is sent)."""
        self.unanswered = False
        """The app lists the ping and left it unanswered (hung, or frozen for long)."""
        self._app, self._timings = target.app, timings
        self._claims: Sequence[asyncio.Event] = ()
        self._noted = not timings.may_handle_in_order(target.app)
        if self._noted:
            self.finished.set()
            return  # it showed it claims late: no ping can prove anything there
        task = asyncio.get_running_loop().create_task(
            _ping_twice(windows, target.window_id), name="anyfill-order-ping"
        )
        _PINGS_WAITING.add(task)
        task.add_done_callback(self._on_answer)

    def watch(self, *claims: asyncio.Event) -> None:
        """The events set when the app claims a selection after these keys."""
        self._claims = claims

    def claimed(self) -> None:
        """The app claimed a selection for these keys (a claim seen only now)."""
        if self.answered.is_set() and not self._noted:
            self._noted = True
            self._timings.note_order(self._app, claimed_first=False)

    def void(self) -> None:
        """A claim came that is no answer to these keys: this side tells nothing."""
        self._noted = True

    def _on_answer(self, task: asyncio.Task[bool | None]) -> None:
        _PINGS_WAITING.discard(task)
        self.finished.set()
        result = None if task.cancelled() or task.exception() is not None else task.result()
        if result is not True:
            self.unanswered = result is False
            return
        # The claim's event was set when the X server's notice of it was read, before
        # the answer (the X server keeps the app's requests in order).
        if not self._noted and any(claim.is_set() for claim in self._claims):
            self._noted = True
            self._timings.note_order(self._app, claimed_first=True)
        self.answered.set()


async def _ping_twice(windows: Windows, window_id: int) -> bool | None:
    """Qt answers a ping as it reads it, and hands the keys read in the same batch to
    its widgets right after, in the same turn of its event loop; a second ping, sent
    once the first was answered, is read in a later turn."""
    first = await windows.ping(window_id, PING_TIMEOUT_S)
    if first is not True:
        return first
    return await windows.ping(window_id, PING_TIMEOUT_S)

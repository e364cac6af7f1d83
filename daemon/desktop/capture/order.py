"""Pings after the capture keys: whether the app has handled them yet.

A ping (see Windows.ping) goes to the app right after a side's select and copy keys,
where that matters: in an app never seen answering, when every side comes out empty.
GTK reads a ping only once it has handled the events before it; Qt answers a ping as it
reads it and hands the keys read in the same batch to its widgets later in that turn of
its event loop, so a second ping, sent once the first was answered, comes after them.
Chromium's browser process answers while its renderer may still be busy with our keys
(any program whose ``Target.relays_input``): there the answers show only that the
browser read the keys, so the window must also be drawn after them (the renderer
handles the keys waiting for it before its next frame; a frozen one draws nothing, not
even its caret's blink), and two more pings answered after that frame (the browser has
caught up with what the renderer sent before it: its claims). Where the platform cannot
show frames, the timed waits stay.

The answers prove that an app has handled our keys, never that it has made every claim
they cause (an input method, or Chromium, claims later): they can make anyfill wait
longer, never shorter.
"""

from __future__ import annotations

import asyncio
import logging

from anyfill.daemon.desktop.ports import Windows

PING_TIMEOUT_S = 2.0
"""How long each ping waits for its answer (in the background once the side is done)."""
DRAWN_TIMEOUT_S = 10.0
"""How long a program that relays its input gets to draw its window after reading our
keys (as long as a frozen app is held; see late_claims.HOLD_CAP_S)."""
log = logging.getLogger("anyfill.capture.order")
_PINGS_WAITING: set[asyncio.Task[bool | None]] = set()
"""Pings still waiting (a reference keeps each task alive until it ends)."""


class KeysHandled:
    """Two pings sent to ``window_id`` right after our keys, in the background; with
    ``relayed``, then a frame of the window and two more pings."""

    def __init__(self, windows: Windows, window_id: int, *, relayed: bool = False) -> None:
        self.answered = asyncio.Event()
        """Set once the app showed that it handled our keys."""
        self.finished = asyncio.Event()
        """Set once the pings (and the wait for a frame) ended, answered or not."""
        self.unanswered = False
        """The app lists the ping and left it unanswered (hung, or frozen for long), or
        relays its input and drew nothing within DRAWN_TIMEOUT_S."""
        work = _relayed(windows, window_id) if relayed else _ping_twice(windows, window_id)
        task = asyncio.get_running_loop().create_task(work, name="anyfill-keys-handled")
        _PINGS_WAITING.add(task)
        task.add_done_callback(self._on_answer)

    def _on_answer(self, task: asyncio.Task[bool | None]) -> None:
        _PINGS_WAITING.discard(task)
        failed = None if task.cancelled() else task.exception()
        if failed is not None:
            log.warning("watching whether the app handled our keys failed: %r", failed)
        result = None if task.cancelled() or failed is not None else task.result()
        self.unanswered = result is False
        if result is True:
            self.answered.set()
        self.finished.set()


async def _ping_twice(windows: Windows, window_id: int) -> bool | None:
    first = await windows.ping(window_id, PING_TIMEOUT_S)
    if first is not True:
        return first
    return await windows.ping(window_id, PING_TIMEOUT_S)


async def _relayed(windows: Windows, window_id: int) -> bool | None:
    """Pings, a frame, pings: see the module's text."""
    read = await _ping_twice(windows, window_id)
    if read is False:
        return False
    paints = await windows.watch_paints(window_id)
    if paints is None:
        return read
    try:
        if not await paints.drawn(DRAWN_TIMEOUT_S):
            log.info("window 0x%x drew nothing after our keys", window_id)
            return False
    finally:
        paints.close()
    log.debug("window 0x%x drew after our keys", window_id)
    return await _ping_twice(windows, window_id) is not False

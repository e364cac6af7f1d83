"""Pings after the capture keys: whether the app has handled them yet.

A ping (see Windows.ping) goes to the app right after a side's select and copy keys,
where that matters: in an app never seen answering, when every side comes out empty.
GTK reads a ping only once it has handled the events before it; Qt answers a ping as it
reads it and hands the keys read in the same batch to its widgets later in that turn of
its event loop, so a second ping, sent once the first was answered, comes after them.
Chromium's browser process answers while its renderer may still be busy with our keys:
there an answer shows nothing, and the timed waits stay.

The answers prove that an app has handled our keys, never that it has made every claim
they cause (an input method, or Chromium, claims later): they can make anyfill wait
longer, never shorter.
"""

from __future__ import annotations

import asyncio

from anyfill.daemon.desktop.ports import Windows

PING_TIMEOUT_S = 2.0
"""How long each ping waits for its answer (in the background once the side is done)."""
_PINGS_WAITING: set[asyncio.Task[bool | None]] = set()
"""Pings still waiting (a reference keeps each task alive until it ends)."""


class KeysHandled:
    """Two pings sent to ``window_id`` right after our keys, in the background."""

    def __init__(self, windows: Windows, window_id: int) -> None:
        self.answered = asyncio.Event()
        """Set once the app answered both pings."""
        self.finished = asyncio.Event()
        """Set once the pings ended, answered or not."""
        self.unanswered = False
        """The app lists the ping and left it unanswered (hung, or frozen for long)."""
        task = asyncio.get_running_loop().create_task(
            _ping_twice(windows, window_id), name="anyfill-keys-handled"
        )
        _PINGS_WAITING.add(task)
        task.add_done_callback(self._on_answer)

    def _on_answer(self, task: asyncio.Task[bool | None]) -> None:
        _PINGS_WAITING.discard(task)
        result = None if task.cancelled() or task.exception() is not None else task.result()
        self.unanswered = result is False
        if result is True:
            self.answered.set()
        self.finished.set()


async def _ping_twice(windows: Windows, window_id: int) -> bool | None:
    first = await windows.ping(window_id, PING_TIMEOUT_S)
    if first is not True:
        return first
    return await windows.ping(window_id, PING_TIMEOUT_S)

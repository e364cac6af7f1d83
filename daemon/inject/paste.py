"""Paste with the user's clipboard kept.

We own the clipboard with the completion, press the app's paste keys, and restore the
user's clipboard only after the app fetched the text and then stayed quiet for a moment
(Chromium reads twice and inserts the second read). If somebody copied in between, their
new clipboard stays: we never restore over it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from anyfill.daemon.desktop import ClipSnapshot, Desktop
from anyfill.daemon.errors import InsertError
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.inject.paste")

QUIET_S = 0.05
"""No further fetch for this long means the app has what it pastes."""


async def paste(
    desktop: Desktop,
    text: str,
    paste_keys: str,
    *,
    restore: bool,
    restore_timeout_s: float,
    guard: Callable[[], None],
    reader: int | None = None,
) -> None:
    """Paste ``text``; ``guard`` runs right before the keys and may refuse by raising.

    ``reader`` is the target window: only its program's fetches count as "pasted".
    """
    clipboard = desktop.clipboard
    saved = await clipboard.snapshot("clipboard") if restore else None
    offer = await clipboard.offer("clipboard", ClipSnapshot.from_text(text), reader)
    restored = False
    try:
        guard()
        offer.fetched.clear()
        started = time.monotonic()
        await desktop.keys.press(paste_keys)
        fetched = await first_set(offer.fetched, timeout_s=restore_timeout_s)
        first_ms = (time.monotonic() - started) * 1000
        deadline = started + restore_timeout_s
        while fetched and time.monotonic() < deadline:
            offer.fetched.clear()
            quiet_s = min(QUIET_S, deadline - time.monotonic())
            if not await first_set(offer.fetched, timeout_s=quiet_s):
                break
        if not fetched:
            raise InsertError(
                f"the application did not fetch the pasted text within {restore_timeout_s:.1f} s"
                f" (paste keys {paste_keys})"
            )
        log.debug(
            "the app fetched the paste %d time(s), first after %.1f ms", offer.fetches, first_ms
        )
    finally:
        if saved is not None:
            if offer.lost.is_set():
                log.info("the clipboard changed while pasting; keeping the new content")
            else:
                await clipboard.restore("clipboard", saved)
                restored = True
        log.debug("paste done, clipboard restored: %s", restored)

"""Paste with the user's clipboard kept.

We own the clipboard with the completion, press the app's paste keys, and restore the
user's clipboard only once the app is done with the paste: it made as many reads as it
made for earlier pastes (Chromium reads twice and inserts the second read) and then asked
nothing at all, TARGETS included, for a quiet period (Chromium asks for TARGETS dozens
of times between its two reads). After restoring we keep watching for a moment: a read of
the restored clipboard by the app means it may have pasted the user's text, and the
paste is reported as such, never as inserted. If somebody copied in between, their new
clipboard stays: we never restore over it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from anyfill.daemon.desktop.capture.order import KeysHandled
from anyfill.daemon.desktop.capture.timings import AppTimings
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Offer
from anyfill.daemon.errors import InsertError, SelectionAppeared
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.inject.paste")

QUIET_S = 0.05
"""No request at all for this long, after the expected reads, means the app is done."""
AFTER_FLOOR_S, AFTER_CAP_S = 0.1, 0.4
"""How long reads of the restored clipboard are watched for: the app's longest paste
span seen, within these bounds."""
CATCH_UP_S = 2.0
"""How long a busy target may take to handle the events sent to it before the paste keys
(its focus change above all); past it the keys go anyway, as they did before."""


@dataclass(frozen=True)
class Pasted:
    fetches: int
    """Reads of the completion by the target."""
    late_read: bool
    """The target read the user's restored clipboard afterwards: what it pasted is unsure."""


async def paste(
    desktop: Desktop,
    text: str,
    paste_keys: str,
    *,
    restore: bool,
    restore_timeout_s: float,
    guard: Callable[[], None],
    reader: int | None = None,
    app: str = "",
    timings: AppTimings | None = None,
    veto: Callable[[], bool] | None = None,
    relayed: bool = False,
) -> Pasted:
    """Paste ``text``; ``guard`` runs right before the keys and may refuse by raising.

    ``reader`` is the target window: only its program's requests count. ``timings``
    holds what ``app`` did on earlier pastes and learns from this one. ``veto`` is asked
    at each read: True refuses the data (a selection appeared that the paste would
    replace) and the paste fails with SelectionAppeared. ``relayed``: the target hands
    its keys to a renderer (``Target.relays_input``); the user's clipboard then goes
    back only once that has drawn the window after the paste keys.
    """
    timings = timings or AppTimings()
    clipboard = desktop.clipboard
    if reader is not None:
        # Before the clipboard is taken: a busy target first handles what it was sent
        # (its focus change above all), then gets the paste keys.
        await desktop.windows.ping(reader, CATCH_UP_S)
    saved = await clipboard.snapshot("clipboard") if restore else None
    offer = await clipboard.offer("clipboard", ClipSnapshot.from_text(text), reader)
    offer.veto = veto
    started = time.monotonic()
    span = 0.0
    try:
        guard()
        offer.fetched.clear()
        offer.asked.clear()
        started = time.monotonic()
        asked_before = offer.requests
        handled = await _press(desktop, paste_keys, reader if relayed else None)
        await _first_read(offer, asked_before, restore_timeout_s)
        if not offer.fetched.is_set():
            if offer.refused.is_set():
                raise _refused()
            if offer.lost.is_set():
                raise InsertError(
                    "the clipboard was taken while pasting (by a copy, maybe a late one in the"
                    " target); the application may have pasted that instead"
                )
            raise InsertError(
                f"the application did not fetch the pasted text within {restore_timeout_s:.1f} s"
                f" (paste keys {paste_keys})"
            )
        span = await _until_done(offer, timings, app, started, started + restore_timeout_s)
        if handled is not None:
            span = await _until_drawn(offer, handled, started, started + restore_timeout_s, span)
        if offer.refused.is_set():
            raise _refused()
        timings.note_paste(app, offer.fetches, span)
        log.debug("the app read the paste %d time(s) in %.1f ms", offer.fetches, span * 1000)
    finally:
        restored = None
        if saved is not None:
            if offer.lost.is_set():
                log.info("the clipboard changed while pasting; keeping the new content")
            else:
                restored = await clipboard.restore("clipboard", saved, reader)
        log.debug("paste done, clipboard restored: %s", restored is not None)
    late_read = False
    if restored is not None:
        learned = timings.paste_span(app) or 0.0
        after = min(AFTER_CAP_S, max(AFTER_FLOOR_S, learned))
        late_read = await first_set(restored.fetched, timeout_s=after)
        if late_read:
            late = time.monotonic() - started
            log.warning("the app read the restored clipboard %.0f ms after the keys", late * 1000)
            timings.note_paste(app, offer.fetches + 1, late)
    return Pasted(offer.fetches, late_read)


async def _first_read(offer: Offer, asked_before: int, timeout_s: float) -> None:
    """Wait for the target's read of the paste, a refusal or the clipboard taken. A target
    that asked something meanwhile (TARGETS, its own formats) is pasting, only slowly (a
    busy Mousepad asked within 0.3 s and read 1.3 s later): it gets the time once more,
    as restoring now would hand it the user's clipboard to paste."""
    await first_set(offer.fetched, offer.refused, offer.lost, timeout_s=timeout_s)
    settled = offer.fetched.is_set() or offer.refused.is_set() or offer.lost.is_set()
    if not settled and offer.requests > asked_before:
        log.info("the application asked but has not read the paste yet; waiting on")
        await first_set(offer.fetched, offer.refused, offer.lost, timeout_s=timeout_s)


async def _press(desktop: Desktop, paste_keys: str, renderer: int | None) -> KeysHandled | None:
    """Send the paste keys; with ``renderer`` (a window whose keys a renderer handles),
    start watching for its frame after them."""
    await desktop.keys.press(paste_keys)
    log.debug("paste keys %s sent", paste_keys)
    return KeysHandled(desktop.windows, renderer, relayed=True) if renderer else None


async def _until_drawn(
    offer: Offer, handled: KeysHandled, started: float, deadline: float, span: float
) -> float:
    """Wait for a renderer's frame after the paste keys; returns the paste's span.

    Chromium's browser process reads the clipboard once by itself; its renderer reads it
    again and inserts that read. A renderer still catching up (just thawed) read 135 ms
    after the keys, past the quiet period, and pasted the user's restored clipboard."""
    fetches = offer.fetches
    await first_set(
        handled.finished, offer.refused, offer.lost, timeout_s=deadline - time.monotonic()
    )
    if offer.fetches == fetches:
        return span
    log.debug("the renderer read the paste after the app went quiet")
    return time.monotonic() - started


def _refused() -> SelectionAppeared:
    return SelectionAppeared(
        "text became selected in the target while pasting; the paste was refused so that it"
        " replaced nothing (the completion was kept)"
    )


async def _until_done(
    offer: Offer, timings: AppTimings, app: str, started: float, deadline: float
) -> float:
    """Wait until the app made its usual number of reads and then went quiet; returns
    the time from the keys to its last request."""
    expected = timings.paste_fetches(app)
    usual_span = timings.paste_span(app) or 0.0
    last = time.monotonic()
    while True:
        now = time.monotonic()
        quiet = QUIET_S
        if offer.fetches < expected:
            # This app read more often before: give its next read the time it took then.
            quiet = max(QUIET_S, started + 1.5 * usual_span - now)
        quiet = min(quiet, deadline - now)
        offer.asked.clear()
        if quiet <= 0 or not await first_set(offer.asked, timeout_s=quiet):
            return last - started
        last = time.monotonic()

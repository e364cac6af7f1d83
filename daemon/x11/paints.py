"""When a window is drawn again: the X DAMAGE extension on one window.

Chromium's browser process answers pings while the renderer behind a page is frozen; the
renderer draws nothing meanwhile, not even its caret's blink (every 500-600 ms), and once
it thaws it handles the keys waiting for it before its next frame. So a frame drawn
after the browser read our keys is the first sign that the page has handled them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from anyfill.daemon.waiting import first_set
from anyfill.daemon.x11.connection import XConnection

log = logging.getLogger("anyfill.x11.paints")


class X11Paints:
    """The :class:`~anyfill.daemon.desktop.ports.Paints` port on X11; see :func:`watch`."""

    def __init__(self, conn: XConnection, damage: int) -> None:
        self._conn = conn
        self.damage = damage
        self.since: int | None = None
        """The sequence number of our first request after the object was made, which
        empties it (None until sent). A new damage object reports the whole window as
        drawn when it is made, which is no frame; each report carries the number of our
        last request the server had handled. (Timestamps cannot tell: the server's
        clock moves on input, not on drawing.)"""
        self._drawn = asyncio.Event()
        self._unsubscribe = conn.on(conn.display.extension_event.DamageNotify, self._on_damage)

    def _on_damage(self, event: Any) -> None:
        if int(event.damage) != self.damage:
            return
        # Report the next frame too (the object reports only when its region was empty).
        self._conn.display.damage_subtract(self.damage)
        self._conn.flush()
        if self.since is not None and (int(event.sequence_number) - self.since) & 0xFFFF < 0x8000:
            self._drawn.set()

    async def drawn(self, timeout_s: float) -> bool:
        return await first_set(self._drawn, timeout_s=timeout_s)

    def close(self) -> None:
        if self.damage == 0:
            return
        self._unsubscribe()
        try:
            self._conn.display.damage_destroy(self.damage)
            self._conn.flush()
        except Exception as exc:  # noqa: BLE001 - the window and server may be gone
            log.debug("ending a damage watch: %s", exc)
        self.damage = 0


async def watch(conn: XConnection, window_id: int) -> X11Paints | None:
    """Watch ``window_id`` for redraws; None without the DAMAGE extension."""
    display = conn.display
    if display is None or not display.has_extension("DAMAGE"):
        return None
    from Xlib.ext import damage

    display.damage_query_version()  # the extension wants it before any other request
    window = display.create_resource_object("window", window_id)
    # Listening from before the next await (events are dispatched only then): a report
    # missed would be the last one, as only a subtract re-arms the object.
    paints = X11Paints(conn, int(window.damage_create(damage.DamageReportNonEmpty)))
    # Emptied at once, so that drawing from now on is reported even before we handled
    # the creation's report; its number is the one before the round trip's.
    display.damage_subtract(paints.damage)
    paints.since = (int(display.damage_query_version().sequence_number) - 1) & 0xFFFF
    # The round trip may have read events into the library's queue: dispatch them.
    conn.schedule_pump()
    return paints

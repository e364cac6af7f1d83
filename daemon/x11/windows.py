"""Which window has the keyboard focus, and what application it belongs to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from anyfill.daemon.desktop.ports import Paints, Target
from anyfill.daemon.desktop.process import process_name, relays_input
from anyfill.daemon.x11 import paints
from anyfill.daemon.x11.connection import XConnection

log = logging.getLogger("anyfill.x11.windows")

MAX_DEPTH = 16
MAX_KNOWN = 512
"""Windows whose WM_PROTOCOLS are remembered at most."""


class X11Windows:
    """The :class:`~anyfill.daemon.desktop.ports.Windows` port on X11."""

    def __init__(self, conn: XConnection) -> None:
        self._conn = conn
        self._silent: set[int] = set()
        """Windows that left a ping unanswered: not waited for again."""
        self._pingable: dict[int, bool] = {}
        """Per window: whether it lists the ping in WM_PROTOCOLS."""
        self._waiting = 0
        """Pings waiting for their answer now."""
        self._root_mask = 0
        """The root window's event mask as it was before the first waiting ping."""

    def focused(self) -> Target | None:
        """The client window holding the input focus (the focus may sit on a child)."""
        try:
            return self._focused()
        finally:
            # Waiting for these replies may have read events (a grabbed key, a selection
            # request) off the socket into python-xlib's queue: dispatch them, or they wait
            # until the socket happens to be readable again.
            self._conn.schedule_pump()

    def _focused(self) -> Target | None:
        from Xlib import error

        try:
            window = self._conn.display.get_input_focus().focus
            if isinstance(window, int) or window is None:
                return None  # PointerRoot or None: nobody has the focus
            for _ in range(MAX_DEPTH):
                wm_class = window.get_wm_class()
                if wm_class:
                    return self._describe(window, wm_class)
                tree = window.query_tree()
                if tree.parent == 0 or tree.parent.id == tree.root.id:
                    return Target(window_id=window.id)
                window = tree.parent
        except error.XError as exc:
            log.debug("the focused window vanished: %s", exc)
        return None

    def _describe(self, window: Any, wm_class: tuple[str, str]) -> Target:
        from Xlib import Xatom

        pid: int | None = None
        prop = window.get_full_property(self._conn.atom("_NET_WM_PID"), Xatom.CARDINAL)
        if prop is not None and len(prop.value):
            pid = int(prop.value[0])
        name = window.get_full_property(
            self._conn.atom("_NET_WM_NAME"), self._conn.atom("UTF8_STRING")
        )
        title = name.value.decode("utf-8", "replace") if name is not None else ""
        return Target(
            window_id=int(window.id),
            app=wm_class[1],
            instance=wm_class[0],
            process=process_name(pid),
            title=title,
            pid=pid,
            relays_input=relays_input(pid),
        )

    def is_password_field(self, target: Target) -> bool | None:
        return None  # X11 itself cannot tell; the accessibility strategy can

    async def ping(self, window_id: int, timeout_s: float) -> bool | None:
        """Ping the window (EWMH ``_NET_WM_PING``) and wait for its answer.

        A toolkit answers a ping when it reads it off its connection, after every event
        queued before it (GTK reads the next X event only once it has handled the ones
        it holds; Qt answers as it reads, and hands the events read with it to its
        widgets in that same turn of its loop): the answer means the program has read
        the focus change and keys sent before, not that it made every claim they cause
        (Chromium's renderer claims later; see capture/order.py). A busy program (a new
        window of a running Mousepad under load handled its focus change ~1 s late)
        would otherwise take our paste keys while it still thinks another window or
        nothing has the focus.
        None at once for windows that do not list the ping in WM_PROTOCOLS, and for a
        window that once left a ping unanswered.
        """
        from Xlib import X
        from Xlib.protocol import event as xevent

        if window_id in self._silent or not self._lists_ping(window_id):
            return None
        conn = self._conn
        ping, protocols = conn.atom("_NET_WM_PING"), conn.atom("WM_PROTOCOLS")
        stamp = await conn.server_time()
        answered = asyncio.get_running_loop().create_future()

        def on_message(event: Any) -> None:
            if event.client_type != protocols or answered.done():
                return
            data = list(event.data[1])
            if data[:3] == [ping, stamp, window_id]:
                answered.set_result(True)

        unsubscribe = conn.on(X.ClientMessage, on_message)
        began = time.monotonic()
        try:
            with self._hearing_answers():
                window = conn.display.create_resource_object("window", window_id)
                message = xevent.ClientMessage(
                    window=window, client_type=protocols, data=(32, [ping, stamp, window_id, 0, 0])
                )
                window.send_event(message, event_mask=X.NoEventMask)
                conn.flush()
                await asyncio.wait_for(answered, timeout_s)
        except TimeoutError:
            # Hung, or it lists the ping without answering it: either way, the next
            # presses do not wait for it again.
            log.info("window 0x%x did not answer a ping within %.1f s", window_id, timeout_s)
            self._silent.add(window_id)
            return False
        finally:
            unsubscribe()
        log.debug(
            "window 0x%x answered a ping in %.1f ms", window_id, (time.monotonic() - began) * 1000
        )
        return True

    async def watch_paints(self, window_id: int) -> Paints | None:
        return await paints.watch(self._conn, window_id)

    def _lists_ping(self, window_id: int) -> bool:
        """Whether the window lists ``_NET_WM_PING`` in WM_PROTOCOLS; read once per window
        (toolkits set it when they map the window), as every press pings."""
        from Xlib import Xatom, error

        known = self._pingable.get(window_id)
        if known is not None:
            return known
        conn = self._conn
        try:
            window = conn.display.create_resource_object("window", window_id)
            listed = window.get_full_property(conn.atom("WM_PROTOCOLS"), Xatom.ATOM)
        except error.XError as exc:
            log.debug("the window to ping vanished: %s", exc)
            return False
        if len(self._pingable) >= MAX_KNOWN:
            self._pingable.clear()  # ids of closed windows come back for new ones
        pingable = listed is not None and conn.atom("_NET_WM_PING") in list(listed.value)
        self._pingable[window_id] = pingable
        return pingable

    @contextlib.contextmanager
    def _hearing_answers(self) -> Iterator[None]:
        """Listen on the root window for its children's messages (where an answer to a
        ping goes) while at least one ping waits; put the old mask back after the last."""
        from Xlib import X

        root = self._conn.root
        if self._waiting == 0:
            self._root_mask = int(root.get_attributes().your_event_mask)
            # GTK sends its answer to those who select SubstructureNotify on the root
            # window, Qt 6 to StructureNotify (with SubstructureRedirect, for the WM).
            listening = X.SubstructureNotifyMask | X.StructureNotifyMask
            root.change_attributes(event_mask=self._root_mask | listening)
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
            if self._waiting == 0:
                root.change_attributes(event_mask=self._root_mask)
                self._conn.flush()

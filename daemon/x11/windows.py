"""Which window has the keyboard focus, and what application it belongs to."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.desktop.process import process_name
from anyfill.daemon.x11.connection import XConnection

log = logging.getLogger("anyfill.x11.windows")

MAX_DEPTH = 16


class X11Windows:
    """The :class:`~anyfill.daemon.desktop.ports.Windows` port on X11."""

    def __init__(self, conn: XConnection) -> None:
        self._conn = conn
        self._silent: set[int] = set()
        """Windows that left a ping unanswered: not waited for again."""

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
        )

    def is_password_field(self, target: Target) -> bool | None:
        return None  # X11 itself cannot tell; the accessibility strategy can

    async def caught_up(self, window_id: int, timeout_s: float) -> bool:
        """Ping the window (EWMH ``_NET_WM_PING``) and wait for its answer.

        A toolkit answers a ping when it reads it off its connection, after every event
        queued before it (GTK reads the next X event only once it has handled the ones
        it holds; Qt handles them in order): the answer means the program has handled
        the focus change and keys sent before. A busy program (a new window of a running
        Mousepad under load handled its focus change ~1 s late) would otherwise take
        our paste keys while it still thinks another window or nothing has the focus.
        Windows that do not list the ping in WM_PROTOCOLS cannot tell: True at once, as
        for a window that once left a ping unanswered.
        """
        from Xlib import X, Xatom, error
        from Xlib.protocol import event as xevent

        if window_id in self._silent:
            return True
        conn = self._conn
        ping, protocols = conn.atom("_NET_WM_PING"), conn.atom("WM_PROTOCOLS")
        try:
            window = conn.display.create_resource_object("window", window_id)
            listed = window.get_full_property(protocols, Xatom.ATOM)
            if listed is None or ping not in list(listed.value):
                return True
            mask = int(conn.root.get_attributes().your_event_mask)
        except error.XError as exc:
            log.debug("the window to ping vanished: %s", exc)
            return True
        stamp = await conn.server_time()
        answered = asyncio.get_running_loop().create_future()

        def on_message(event: Any) -> None:
            if event.client_type != protocols or answered.done():
                return
            data = list(event.data[1])
            if data[:3] == [ping, stamp, window_id]:
                answered.set_result(True)

        unsubscribe = conn.on(X.ClientMessage, on_message)
        # The answer goes to the root window, to those who listen for its children.
        conn.root.change_attributes(event_mask=mask | X.SubstructureNotifyMask)
        began = time.monotonic()
        try:
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
            conn.root.change_attributes(event_mask=mask)
            conn.flush()
        log.debug(
            "window 0x%x answered a ping in %.1f ms", window_id, (time.monotonic() - began) * 1000
        )
        return True

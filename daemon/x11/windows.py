"""Which window has the keyboard focus, and what application it belongs to."""

from __future__ import annotations

import logging
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

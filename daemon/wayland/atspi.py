"""AT-SPI on Wayland: insertion at the caret through EditableText, and the active window.

AT-SPI does not depend on the display protocol, so it reaches native Wayland GTK, Qt and
(with accessibility on) Chromium windows. libatspi is not thread-safe: every call runs on
one thread of ours, and each call sequence holds :data:`LOCK`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from anyfill.daemon.desktop.capture.accessibility import (
    MAX_NODES,
    accessibility_bus_problem,
    load_atspi,
)
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.desktop.process import process_name
from anyfill.daemon.errors import InsertError, SecureField

log = logging.getLogger("anyfill.wayland.atspi")

LOCK = threading.Lock()
TIMEOUT_S = 1.5
"""Generous: an insertion that times out leaves it unknown whether the text landed."""
RETRY_S = 300.0
"""An application whose text field refused EditableText is pasted into for this long
before AT-SPI is tried again (the choice is cached per application)."""

Landed = Literal["inserted", "absent", "refused"]


class AtspiInserter:
    """The :class:`~anyfill.daemon.desktop.ports.DirectInsert` port through AT-SPI EditableText."""

    name = "accessibility"

    def __init__(self) -> None:
        self._atspi, self.unavailable = load_atspi()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="anyfill-atspi-insert")
        self._refused: dict[str, float] = {}
        self._bus_checked = False

    async def insert(self, text: str, target: Target, guard: Callable[[], None]) -> bool:
        if self._atspi is None or target.pid is None:
            return False
        app = target.app or target.process or str(target.pid)
        if self._refused.get(app, 0.0) > time.monotonic():
            log.debug("%s refused EditableText recently; pasting", app)
            return False
        guard()
        loop = asyncio.get_running_loop()
        try:
            landed = await asyncio.wait_for(
                loop.run_in_executor(self._thread, self._insert, target.pid, text), TIMEOUT_S
            )
        except TimeoutError:
            # The call may still land later: pasting now could insert twice.
            raise InsertError(
                "the application did not answer the AT-SPI insertion in time; "
                "check the document (the completion was kept)"
            ) from None
        if landed != "inserted":
            log.info("AT-SPI insertion not possible in %s (%s); falling back", app, landed)
            self._refused[app] = time.monotonic() + RETRY_S
            return False
        self._refused.pop(app, None)
        return True

    def _insert(self, pid: int, text: str) -> Landed:
        with LOCK:
            if not self._bus_checked:
                if accessibility_bus_problem():
                    return "absent"
                self._bus_checked = True
            atspi = self._atspi
            node = focused_text(atspi, pid)
            if node is None:
                return "absent"
            if node.get_role() == atspi.Role.PASSWORD_TEXT:
                raise SecureField("the caret is in a password field")
            if "EditableText" not in node.get_interfaces():
                return "refused"
            caret = atspi.Text.get_caret_offset(node)
            before = atspi.Text.get_text(node, 0, -1)
            if caret < 0:
                return "refused"
            # The length is in bytes for GTK (gtk_text_buffer_insert); others ignore it.
            atspi.EditableText.insert_text(node, caret, text, len(text.encode("utf-8")))
            after = atspi.Text.get_text(node, 0, -1)
            if after == before:
                return "refused"  # read-only, or the call is not implemented
            if after[caret : caret + len(text)] != text:
                raise InsertError(
                    "the application changed the text, but not as asked; "
                    "check the document (the completion was kept)"
                )
            end = caret + len(text)
            if atspi.Text.get_caret_offset(node) != end:
                atspi.Text.set_caret_offset(node, end)
            return "inserted"


def focused_text(atspi: Any, pid: int) -> Any:
    """The focused node with a Text interface in the application of process ``pid``."""
    desktop = atspi.get_desktop(0)
    for index in range(desktop.get_child_count()):
        app = desktop.get_child_at_index(index)
        if app is not None and app.get_process_id() == pid:
            node = _find(app, lambda n: _is_focused_text(atspi, n))
            if node is not None:
                return node
    return None


class AtspiFocus:
    """The active window from AT-SPI, for compositors without an IPC we speak (GNOME, KDE).

    The window id is the process id and the window's index in its application: stable
    while the window lives, different for another window of the same program.
    """

    name = "AT-SPI"

    def __init__(self) -> None:
        self._atspi, self.unavailable = load_atspi()
        self._bus_ok = False

    def focused(self) -> Target | None:
        if self._atspi is None:
            return None
        with LOCK:
            if not self._bus_ok:
                if accessibility_bus_problem():
                    return None
                self._bus_ok = True
            atspi = self._atspi
            desktop = atspi.get_desktop(0)
            for index in range(desktop.get_child_count()):
                app = desktop.get_child_at_index(index)
                if app is None:
                    continue
                for position in range(app.get_child_count()):
                    window = app.get_child_at_index(position)
                    if window is not None and window.get_state_set().contains(
                        atspi.StateType.ACTIVE
                    ):
                        pid = int(app.get_process_id())
                        return Target(
                            window_id=(pid << 16) | position,
                            app=str(app.get_name() or ""),
                            process=process_name(pid),
                            title=str(window.get_name() or ""),
                            pid=pid,
                        )
        return None


def _is_focused_text(atspi: Any, node: Any) -> bool:
    return bool(
        node.get_state_set().contains(atspi.StateType.FOCUSED) and "Text" in node.get_interfaces()
    )


def _find(root: Any, match: Callable[[Any], bool]) -> Any:
    """Breadth-first, bounded: a huge tree cannot stall the press."""
    queue, seen = [root], 0
    while queue and seen < MAX_NODES:
        node = queue.pop(0)
        seen += 1
        if match(node):
            return node
        queue.extend(
            child
            for child in (node.get_child_at_index(i) for i in range(node.get_child_count()))
            if child is not None
        )
    return None

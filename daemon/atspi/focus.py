"""The active window from AT-SPI, for compositors without an IPC we speak (GNOME, KDE)."""

from __future__ import annotations

import logging

from anyfill.daemon.atspi.session import AtspiSession, NoAccessibility, shared_session
from anyfill.daemon.atspi.tree import active_window
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.desktop.process import process_name

log = logging.getLogger("anyfill.atspi.focus")

TIMEOUT_S = 1.0
"""The caller waits (it is not a coroutine): bounded, and no answer means no window."""


class AtspiFocus:
    """The window id is the process id and the window's index in its application: stable
    while the window lives, different for another window of the same program."""

    name = "AT-SPI"

    def __init__(self, session: AtspiSession | None = None) -> None:
        self._session = session or shared_session()
        self.unavailable = self._session.unavailable

    def focused(self) -> Target | None:
        try:
            window = self._session.call_blocking(active_window, TIMEOUT_S)
        except NoAccessibility:
            return None
        except TimeoutError:
            log.info("AT-SPI did not tell the active window within %.1f s", TIMEOUT_S)
            return None
        if window is None:
            return None
        return Target(
            window_id=(window.pid << 16) | window.position,
            app=window.app,
            process=process_name(window.pid),
            title=window.title,
            pid=window.pid,
        )

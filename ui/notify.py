"""Notifications for problems the user must fix: each kind once, with the fix in the text.

Through the tray icon when there is one, else the desktop's notification service (through
libnotify's ``notify-send``), and always the log.
"""

from __future__ import annotations

import logging
import shutil

from PySide6.QtCore import QProcess
from PySide6.QtWidgets import QSystemTrayIcon

from anyfill.daemon.bus.status import Problem
from anyfill.daemon.errors import HotkeyTaken
from anyfill.daemon.scheduler.events import AttemptFinished

log = logging.getLogger("anyfill.ui.notify")

TIMEOUT_MS = 10_000


def problem_of(
    event: AttemptFinished, urls: dict[str, str], quiet: frozenset[str] = frozenset()
) -> Problem | None:
    """The problem a failed attempt reveals, when the user has something to fix. Nothing
    listening for a ``quiet`` backend (a default the user never set up, see
    ``managed.optional``) is none: the managed server serves instead."""
    url = urls.get(event.backend, "its URL")
    if event.outcome == "unavailable" and event.backend in quiet:
        return None
    if event.outcome == "unavailable":
        return Problem(
            f"backend_down:{event.backend}",
            f"Nothing answers for backend '{event.backend}' at {url}.",
            "Start the server, or fix backends.url in the settings.",
        )
    if event.outcome == "auth":
        return Problem(
            f"key_refused:{event.backend}",
            f"Backend '{event.backend}' refused the API key.",
            f"Store a valid key: anyfill config set-key {event.backend}",
        )
    if event.outcome == "not_found":
        return Problem(
            f"model:{event.backend}",
            f"Backend '{event.backend}' does not know the model.",
            "Fix backends.model in the settings.",
        )
    return None


def problem_of_stop(reason: str, error: BaseException | None = None) -> Problem:
    """Why the core could not run (``error``: what it raised), as a problem with its fix."""
    lowered = reason.lower()
    if isinstance(error, HotkeyTaken):
        return Problem("hotkey_taken", reason, "Choose another combination in [hotkeys].")
    if "display" in lowered:
        return Problem("no_display", reason, "Run anyfill inside your desktop session.")
    return Problem("core_stopped", reason, "See the log, or run: anyfill doctor")


class Notifier:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.tray: QSystemTrayIcon | None = None
        self._said: set[str] = set()
        self.shown: list[tuple[str, str]] = []
        """(title, text) of every notification shown, newest last (for tests and logs)."""

    def problem(self, problem: Problem) -> bool:
        """Tell the user once per kind; False when this kind was already told."""
        if problem.kind in self._said:
            return False
        self._said.add(problem.kind)
        text = f"{problem.message} {problem.fix}".strip()
        log.warning("%s", text)
        self.notify("anyfill: fix needed", text)
        return True

    def notify(self, title: str, text: str) -> None:
        self.shown.append((title, text))
        if not self.enabled:
            return
        tray = self.tray
        if tray is not None and tray.isVisible() and QSystemTrayIcon.supportsMessages():
            tray.showMessage(title, text, QSystemTrayIcon.MessageIcon.Warning, TIMEOUT_MS)
            return
        if not self._desktop_notify(title, text):
            log.info("no notification service: %s: %s", title, text)

    def _desktop_notify(self, title: str, text: str) -> bool:
        """libnotify's notify-send talks to whichever notification service runs."""
        program = shutil.which("notify-send")
        if program is None:
            return False
        started, _pid = QProcess.startDetached(
            program, ["--app-name=anyfill", "--icon=dialog-warning", title, text]
        )
        return bool(started)

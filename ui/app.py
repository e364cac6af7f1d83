"""``anyfill run``: the Qt application around the core: tray, preview popup, notifications.

Qt owns the main thread; the core runs on its own thread behind :class:`CoreBridge`.
Without a system tray (GNOME without the AppIndicator extension, some tiling window
managers) the hotkeys and the preview keep working: the log and a notification say so
once, and ``anyfill status`` answers from the command line.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication

from anyfill.config.model import Settings
from anyfill.daemon.app import desktop_kind
from anyfill.daemon.bus.status import (
    BackendsReady,
    PressFinished,
    PreviewClosed,
    PreviewShown,
    PreviewText,
    Problem,
    ShowWindow,
)
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.managed.optional import quiet_when_absent
from anyfill.daemon.models.download import ModelDownload
from anyfill.daemon.scheduler.events import AttemptFinished
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.ghost import GhostText
from anyfill.ui.history import History
from anyfill.ui.layer_surface import LayerPresenter
from anyfill.ui.managed import ModelDownloads, problem_of_server
from anyfill.ui.notify import Notifier, problem_of, problem_of_stop
from anyfill.ui.popup import PreviewPopup
from anyfill.ui.state import TrayState
from anyfill.ui.tray import Tray
from anyfill.ui.windows import WindowHost

log = logging.getLogger("anyfill.ui")

TRAY_RETRY_MS = 5_000
NO_TRAY = Problem(
    "no_tray",
    "No system tray here, so anyfill shows no icon; the hotkeys and the preview work.",
    "On GNOME enable the 'AppIndicator and KStatusNotifierItem Support' extension. "
    "`anyfill status` shows the state; stop anyfill with Ctrl+C or its service.",
)


class TrayApp(QObject):
    """Wires the bridge's events to the tray, the popup, the history and notifications."""

    def __init__(
        self,
        app: QApplication,
        settings: Settings,
        config_path: Path,
        bridge: CoreBridge | None = None,
    ) -> None:
        super().__init__()
        self.app = app
        self.bridge = bridge or CoreBridge(settings)
        self._quiet = quiet_when_absent(settings)
        self.state = TrayState(chain=tuple(settings.routing.default), quiet=self._quiet)
        self.history = History(settings.ui.history_size)
        self.notifier = Notifier(settings.ui.notifications)
        self.windows = WindowHost(self.bridge, config_path)
        self.layer = LayerPresenter.connect_default() if on_wayland() else None
        self.popup = PreviewPopup(settings.ui.preview_font_size, presenter=self.layer)
        # Ghost text: an X11 window at the caret; on Wayland an image on the popup's layer
        # surface (one preview at a time, so they share it).
        self.ghost = GhostText(presenter=self.layer)
        self.downloads = ModelDownloads(self.bridge, self.notifier)
        self.tray = Tray(
            self.bridge, self.state, self.history, self.windows, self.quit, downloads=self.downloads
        )
        self.ready_at: float | None = None
        self._urls = {b.name: b.url for b in settings.backends}
        self._want_tray = settings.ui.tray
        self._tray_watch: QTimer | None = None
        self.bridge.core_event.connect(self.on_event)
        self.tray.icon.messageClicked.connect(self.offer_missing_model)
        self.bridge.ready.connect(self.on_ready)
        self.bridge.stopped.connect(self.on_stopped)

    def start(self) -> None:
        if self._want_tray and not self._show_tray():
            self.notifier.problem(NO_TRAY)
            # A panel started after us (a session still coming up) gets the icon then.
            self._tray_watch = QTimer(self)
            self._tray_watch.timeout.connect(self._show_tray)
            self._tray_watch.start(TRAY_RETRY_MS)
        self.bridge.start()

    def _show_tray(self) -> bool:
        if self.tray.icon.isVisible():
            return True
        if not Tray.available():
            return False
        self.notifier.tray = self.tray.icon
        self.tray.show()
        log.info("tray icon shown")
        log.debug("tray icon shown at %.6f", time.monotonic())  # bench/bench_tray.py
        if self._tray_watch is not None:
            self._tray_watch.stop()
        return True

    def show_window(self, window: str) -> None:
        """A second `anyfill run` (or `anyfill` over the control socket) asked for a window."""
        if window == "settings":
            self.windows.show_settings()
        elif window == "diagnostics":
            self.windows.show_diagnostics()

    def quit(self) -> None:
        self.popup.hide()
        self.ghost.hide()
        self.app.quit()

    # -- from the core ----------------------------------------------------------------

    def on_ready(self, status: object) -> None:
        self.ready_at = time.monotonic()
        self.on_event(status)
        tray = self.tray.icon.isVisible()
        self.bridge.call(lambda core: core.ui_status.update(icon=tray, host=Tray.available()))
        log.info("tray ready" if tray else "tray ready (no tray host: no icon)")

    def _backends_built(self) -> None:
        """The core built its backends (after ready, or again on a reload): catch up with
        the managed servers, whose state may have changed before we listened to them."""
        self.bridge.then(self.bridge.managed_servers(), self._replay)

    def on_stopped(self, reason: str) -> None:
        if not reason:
            return
        problem = problem_of_stop(reason, self.bridge.stop_error)
        self.state.apply(problem)
        self.tray.refresh()
        self.notifier.problem(problem)
        if not self.tray.icon.isVisible():
            self.app.exit(1)  # nothing left to show: no core and no tray to explain it

    def _server_changed(self, event: ManagedServerChanged) -> None:
        icon = self.tray.icon.isVisible()
        problem = problem_of_server(event, menu=icon)
        if problem is None or not self.notifier.problem(problem):
            return
        if event.state == "missing_model" and event.model_size and not icon:
            # No tray icon, so no menu to offer it from: ask once, on its own.
            self.downloads.offer(event)

    def offer_missing_model(self) -> None:
        """The user clicked our notification: offer the download when a model is missing."""
        for server in self.state.missing():
            if server.state == "missing_model" and server.model_size:
                self.downloads.offer(server)
                return

    def _replay(self, events: list[ManagedServerChanged]) -> None:
        for event in events:
            log.debug(
                "managed server '%s' is %s (caught up once the backends were built)",
                event.backend,
                event.state,
            )
            self.on_event(event)

    def on_event(self, event: object) -> None:
        if isinstance(event, PreviewText):
            if event.preview_id == self.ghost.preview_id:
                self.ghost.show_text(event)
                log.debug("ghost %d: %d characters", event.preview_id, len(event.text))
                return
            self.popup.show_text(event)
            log.debug(
                "popup %d: %d characters%s",
                event.preview_id,
                len(event.text),
                " (final)" if event.final else "",
            )
            return
        if isinstance(event, PreviewShown) and self.ghost.fits(event):
            self.ghost.open_for(event)
            log.debug(
                "ghost %d opened at the caret %s, font %r %.1f pt",
                event.preview_id,
                event.caret,
                event.font_family,
                event.font_size,
            )
        elif isinstance(event, PreviewShown):
            self.popup.open_for(event)
            if self.popup.at_fixed_place:
                log.debug(
                    "popup %d shown at the top of the screen, %s, on a layer surface",
                    event.preview_id,
                    self.popup.size().toTuple(),
                )
            else:
                log.debug(
                    "popup %d shown at %s%s",
                    event.preview_id,
                    self.popup.position().toTuple(),
                    " on a layer surface" if self.popup.on_layer_surface else "",
                )
        elif isinstance(event, PreviewClosed):
            self.popup.close_for(event.preview_id)
            self.ghost.close_for(event.preview_id)
            log.debug("popup %d closed: %s", event.preview_id, event.reason)
        elif isinstance(event, PressFinished):
            self.tray.on_finished(event)
        elif isinstance(event, Problem):
            self.notifier.problem(event)
        elif isinstance(event, ShowWindow):
            self.show_window(event.window)
            return
        elif isinstance(event, BackendsReady):
            self._backends_built()
            return
        elif isinstance(event, ManagedServerChanged):
            self._server_changed(event)
        elif isinstance(event, ModelDownload):
            self.downloads.on_event(event)
        elif isinstance(event, AttemptFinished):
            problem = problem_of(event, self._urls, self._quiet)
            if problem is not None:
                self.notifier.problem(problem)
            if self.state.apply(event):
                self.tray.refresh()
            return
        if self.state.apply(event):
            self.tray.refresh()


def run_tray(settings: Settings, config_path: Path) -> int:
    """Run the tray application until the user quits; the exit code."""
    if desktop_kind() == "x11" and "QT_QPA_PLATFORM" not in os.environ:
        # The desktop path is X11 (also for Xwayland apps in a Wayland session): the popup
        # must be an X11 window too, or it cannot be placed at their caret.
        os.environ["QT_QPA_PLATFORM"] = "xcb"
    # On every platform: libatspi (the core's AT-SPI thread) attaches the connections it
    # opens to applications to GLib's default main context; Qt's GLib event dispatcher
    # would dispatch that context on the GUI thread at the same time, racing libatspi
    # (a segfault when an application closed, AT-SPI calls that stalled past their wait).
    os.environ.setdefault("QT_NO_GLIB", "1")
    app = QApplication.instance() or QApplication(["anyfill"])
    assert isinstance(app, QApplication)
    app.setApplicationName("anyfill")
    app.setQuitOnLastWindowClosed(False)  # closing a window never quits a tray app
    tray_app = TrayApp(app, settings, config_path)
    _quit_on_signals(app)
    tray_app.start()
    try:
        return app.exec()
    finally:
        tray_app.popup.hide()
        if tray_app.layer is not None:
            tray_app.layer.close()
        if not tray_app.bridge.stop():
            log.warning("the core did not stop within 5 s")


def on_wayland() -> bool:
    """Qt draws on a Wayland compositor: the popup then goes on a layer surface."""
    return QApplication.platformName() == "wayland"


def _quit_on_signals(app: QApplication) -> None:
    """Ctrl+C and SIGTERM quit cleanly (hotkeys released, clipboard handed over)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    # Python runs signal handlers between bytecodes: wake the interpreter now and then.
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)
    timer.start(200)

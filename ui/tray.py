"""The tray icon and its menu: every action lives in the menu (on GNOME's AppIndicator a
left click only opens it), the icon and tooltip follow the core's events."""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QAction, QActionGroup, QCursor, QGuiApplication
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from anyfill.daemon.bus.status import PressFinished
from anyfill.ui import icons
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.history import History
from anyfill.ui.managed import ModelDownloads, download_label
from anyfill.ui.state import TrayState
from anyfill.ui.windows import WindowHost

log = logging.getLogger("anyfill.ui.tray")

INSERT_MODES = (("paste", "Paste"), ("preview", "Preview first"), ("type", "Type"))
REFRESH_MS = 5_000
"""Redraw now and then: an error look expires, metrics change the tooltip."""


class Tray(QObject):
    def __init__(
        self,
        bridge: CoreBridge,
        state: TrayState,
        history: History,
        windows: WindowHost,
        quit_app: Callable[[], None],
        *,
        downloads: ModelDownloads | None = None,
    ) -> None:
        super().__init__()
        self._bridge = bridge
        self._state = state
        self._history = history
        self._windows = windows
        self._quit = quit_app
        self._downloads = downloads
        self.icon = QSystemTrayIcon(icons.icon("idle"))
        self.menu = QMenu()
        self.menu.aboutToShow.connect(self.rebuild_menu)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self.rebuild_menu()
        self.refresh()
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.refresh)
        self._timer.start(REFRESH_MS)

    @staticmethod
    def available() -> bool:
        return QSystemTrayIcon.isSystemTrayAvailable()

    def show(self) -> None:
        self.icon.show()

    def refresh(self) -> None:
        look = self._state.look()
        self.icon.setIcon(icons.icon(look, len(self._state.in_flight)))
        self.icon.setToolTip(self._state.tooltip())

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        # A left click opens the menu as well, as AppIndicator hosts do.
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.rebuild_menu()
            self.menu.popup(QCursor.pos())

    # -- the menu --------------------------------------------------------------------

    def rebuild_menu(self) -> None:
        menu, state = self.menu, self._state
        menu.clear()
        headline = menu.addAction(state.tooltip().split("\n", 1)[0])
        headline.setEnabled(False)
        menu.addSeparator()
        self._add_fixes(menu)
        if state.paused:
            menu.addAction("Resume", self._bridge.resume)
        else:
            menu.addAction("Pause", self._bridge.pause)
        if state.suggestions == "on":
            menu.addAction(
                "Pause suggestions as you type", lambda: self._bridge.pause_suggestions(True)
            )
        elif state.suggestions == "paused" and not state.paused:
            menu.addAction(
                "Resume suggestions as you type", lambda: self._bridge.pause_suggestions(False)
            )

        modes = menu.addMenu("Insert mode")
        group = QActionGroup(modes)
        for mode, label in INSERT_MODES:
            action = modes.addAction(label)
            action.setCheckable(True)
            action.setChecked(state.insert_mode == mode)
            action.triggered.connect(lambda _=False, m=mode: self._bridge.set_insert_mode(m))
            group.addAction(action)

        first = menu.addMenu("First backend")
        first.setEnabled(bool(state.backends))
        group = QActionGroup(first)
        for name in state.backends:
            label = f"{name} (cooling down)" if name in state.cooling else name
            action = first.addAction(label)
            action.setCheckable(True)
            action.setChecked(bool(state.chain) and state.chain[0] == name)
            action.triggered.connect(lambda _=False, n=name: self._bridge.set_first_backend(n))
            group.addAction(action)

        recent = menu.addMenu("Recent completions")
        entries = self._history.entries()
        if not entries:
            none = recent.addAction("No completions yet")
            none.setEnabled(False)
        for entry in entries:
            action = recent.addAction(entry.label())
            action.setToolTip("Copy to the clipboard")
            action.triggered.connect(lambda _=False, text=entry.middle: self.copy(text))

        menu.addSeparator()
        menu.addAction("Settings…", self._windows.show_settings)
        menu.addAction("Edit the config file", self._windows.open_config_file)
        menu.addAction("Diagnostics…", self._windows.show_diagnostics)
        menu.addAction("Open log folder", self._windows.open_log_folder)
        menu.addSeparator()
        quit_action = QAction("Quit anyfill", menu)
        quit_action.triggered.connect(self._quit)
        menu.addAction(quit_action)

    def _add_fixes(self, menu: QMenu) -> None:
        """What a missing managed server needs: the download offer, or the fix to copy."""
        missing, downloads = self._state.missing(), self._downloads
        for server in missing:
            if server.state == "missing_model" and server.model_size and downloads is not None:
                action = menu.addAction(download_label(server))
                action.triggered.connect(lambda _=False, s=server, d=downloads: d.offer(s))
            elif server.fix:
                action = menu.addAction(f"Copy the fix: {server.fix}")
                action.setToolTip(server.detail)
                action.triggered.connect(lambda _=False, fix=server.fix: self.copy(fix))
        if missing:
            menu.addSeparator()

    def copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        log.info("copied a recent completion to the clipboard (%d characters)", len(text))

    def on_finished(self, event: PressFinished) -> None:
        if self._history.add(event):
            log.debug("history: %d entries", len(self._history.entries()))

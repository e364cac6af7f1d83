"""The windows the tray opens, one instance each: settings (the panel of ``ui.settings``),
diagnostics; and the folders and files it hands to the desktop (the config file in the
user's editor, the log folder)."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices

from anyfill.config.store import write_default_config
from anyfill.daemon.log import log_dir
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.diagnostics import DiagnosticsWindow

log = logging.getLogger("anyfill.ui.windows")


class WindowHost:
    def __init__(self, bridge: CoreBridge, config_path: Path) -> None:
        self.bridge = bridge
        self.config_path = config_path
        self._diagnostics: DiagnosticsWindow | None = None
        self.opened: list[str] = []
        """URLs handed to the desktop, newest last (the log says so too)."""

    def show_settings(self) -> None:
        """The settings panel (one window, raised when already open); saving writes the file
        the core watches, which applies it at once. A file that does not exist is written
        with its comments first."""
        from anyfill.ui.settings import show_settings

        if not self.config_path.exists():
            write_default_config(self.config_path)
        self.opened.append("settings")
        log.info("opening the settings window for %s", self.config_path)
        show_settings(self.bridge, self.config_path)

    def open_config_file(self) -> None:
        """The configuration file in the user's editor."""
        if not self.config_path.exists():
            write_default_config(self.config_path)
        self._open(QUrl.fromLocalFile(str(self.config_path)))

    def show_diagnostics(self) -> None:
        if self._diagnostics is None:
            self._diagnostics = DiagnosticsWindow(self.bridge, self.config_path)
        self._diagnostics.run_checks()
        self._diagnostics.show()
        self._diagnostics.raise_()
        self._diagnostics.activateWindow()

    def open_log_folder(self) -> None:
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        self._open(QUrl.fromLocalFile(str(folder)))

    def _open(self, url: QUrl) -> None:
        self.opened.append(url.toString())
        log.info("opening %s", url.toString())
        if not QDesktopServices.openUrl(url):
            log.warning("no application opens %s; open it yourself", url.toLocalFile())

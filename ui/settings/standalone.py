"""``anyfill settings``: the panel in its own process, next to a running anyfill or not.

The core it talks to runs no desktop (no hotkeys: the daemon holds them); it only serves
the panel's backend tests and window picking, through the one bridge.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

from anyfill.config.model import Settings
from anyfill.config.store import InvalidConfig
from anyfill.daemon.core import Core
from anyfill.daemon.errors import DesktopUnavailable


async def panel_core(core: Core, stop: asyncio.Event, ready: Callable[[], None]) -> None:
    """A core loop without a desktop: it runs what the panel submits until asked to stop."""
    ready()
    await stop.wait()


def run_settings(settings: Settings, path: Path) -> int:
    """The ``settings`` front end: ``settings`` (file + environment) are those the command
    line read; the panel edits the file's own values, read again from ``path``."""
    del settings
    if not any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")):
        # Qt would abort the process with a core dump; say what is missing instead.
        raise DesktopUnavailable(
            "the settings panel needs a display (DISPLAY or WAYLAND_DISPLAY is not set); "
            f"without one, edit {path} and check it with 'anyfill config validate'"
        )
    from PySide6.QtWidgets import QApplication

    from anyfill.ui.bridge import CoreBridge
    from anyfill.ui.settings import show_settings
    from anyfill.ui.settings.draft import load_for_editing

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName("anyfill")
    app.setApplicationDisplayName("anyfill settings")
    try:
        editing = load_for_editing(path)
    except InvalidConfig as exc:
        return _report_invalid(path, exc)
    bridge = CoreBridge(editing, runner=panel_core)
    bridge.start()
    try:
        window = show_settings(bridge, path)
        window.destroyed.connect(app.quit)
        app.setQuitOnLastWindowClosed(True)
        return int(app.exec())
    finally:
        bridge.stop()


def _report_invalid(path: Path, exc: InvalidConfig) -> int:
    """The panel edits valid settings only: name each problem and offer the file."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Critical, "anyfill settings", "")
    box.setText("The configuration file has problems; fix them, then open the settings again.")
    box.setInformativeText(
        "\n".join(problem.render(exc.path or str(path)) for problem in exc.problems)
    )
    open_file = box.addButton("Open the file", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Close)
    box.exec()
    if box.clickedButton() is open_file:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
    return 2

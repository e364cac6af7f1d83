"""The settings panel: one module per page, all editing one :class:`Draft` of the file.

Open it with :func:`show_settings` (the tray's "Settings…" item and ``anyfill settings``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anyfill.ui.bridge import CoreBridge
    from anyfill.ui.settings.window import SettingsWindow

__all__ = ["show_settings"]

_open: dict[int, SettingsWindow] = {}


def show_settings(bridge: CoreBridge | None, path: Path | None = None) -> SettingsWindow:
    """Show the settings window for ``bridge`` (one per bridge: raised when already open)."""
    from anyfill.ui.settings.window import SettingsWindow

    window = _open.get(id(bridge))
    if window is None or not window.isVisible():
        window = SettingsWindow(bridge, path)
        _open[id(bridge)] = window
    window.show()
    window.raise_()
    window.activateWindow()
    return window

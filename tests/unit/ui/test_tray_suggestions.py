"""The tray with suggestions as you type on: it says so, and one click pauses them (the
hotkeys keep working) and resumes them; with them off, no such item."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from anyfill.config.model import Settings
from anyfill.ui.app import TrayApp
from anyfill.ui.bridge import CoreBridge
from tests.unit.ui.test_tray_app import actions, settings, switches_only


def make_tray(qtbot: QtBot, tmp_path: Path, config: Settings) -> TrayApp:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    bridge = CoreBridge(config, runner=switches_only)
    tray = TrayApp(app, config, tmp_path / "config.toml", bridge=bridge)
    tray.notifier.enabled = False
    with qtbot.waitSignal(bridge.ready, timeout=5000):
        tray.start()
    return tray


@pytest.fixture
def suggesting(qtbot: QtBot, tmp_path: Path) -> Iterator[TrayApp]:
    config = Settings.model_validate({**settings().model_dump(), "suggestions": {"auto": True}})
    tray = make_tray(qtbot, tmp_path, config)
    yield tray
    tray.bridge.stop()


def test_one_click_pauses_suggestions_and_the_hotkeys_go_on(
    suggesting: TrayApp, qtbot: QtBot
) -> None:
    assert suggesting.state.suggestions == "on"
    assert "suggestions as you type: on" in suggesting.state.tooltip()
    suggesting.tray.rebuild_menu()
    actions(suggesting.tray.menu)["Pause suggestions as you type"].trigger()
    qtbot.waitUntil(lambda: suggesting.state.suggestions == "paused")
    status = suggesting.bridge.status().result(5)
    assert status.suggestions == "paused"
    assert not status.paused  # the hotkeys still work
    suggesting.tray.rebuild_menu()
    menu = actions(suggesting.tray.menu)
    assert "Pause suggestions as you type" not in menu
    menu["Resume suggestions as you type"].trigger()
    qtbot.waitUntil(lambda: suggesting.state.suggestions == "on")


def test_no_suggestion_item_while_they_are_off(qtbot: QtBot, tmp_path: Path) -> None:
    tray = make_tray(qtbot, tmp_path, settings())
    try:
        tray.tray.rebuild_menu()
        assert not [name for name in actions(tray.tray.menu) if "suggestions" in name]
        assert "suggestions" not in tray.state.tooltip()
    finally:
        tray.bridge.stop()

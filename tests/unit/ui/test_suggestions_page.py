"""The Suggestions page: turning suggestions on and picking the style saves exactly those
keys; the page says that the listener switches some Qt apps into screen-reader mode."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from anyfill.config.store import parse_settings
from anyfill.ui.settings.apps import AppsPage
from anyfill.ui.settings.suggestions import SuggestionsPage
from tests.unit.foundation.conftest import file_keyring
from tests.unit.ui.test_settings_panel import (
    USER_FILE,
    changed_lines,
    config,
    isolated,
    open_window,
    page,
)

__all__ = ["config", "file_keyring", "isolated"]


def test_suggestions_turned_on_save_only_their_keys(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    window.show()
    suggestions = page(window, SuggestionsPage)
    assert isinstance(suggestions, SuggestionsPage)
    assert not suggestions.auto.isChecked()
    assert "screen-reader mode" in suggestions.note.text()
    suggestions.auto.click()
    suggestions.show_as.setCurrentIndex(suggestions.show_as.findData("popup"))
    suggestions.show_as.activated.emit(suggestions.show_as.currentIndex())
    suggestions.pause.setValue(250)
    qtbot.mouseClick(window.save_button, Qt.MouseButton.LeftButton)
    new = config.read_text()
    assert changed_lines(USER_FILE, new) == [
        "+",
        "+[suggestions]",
        "+auto = true",
        '+style = "popup"',
        "+pause_ms = 250",
    ]
    saved = parse_settings(new, path=str(config), environ={})
    assert saved.suggestions.auto
    assert saved.suggestion_chain() == ("local",)  # codestral is not asked automatically


def test_a_bad_pause_is_refused_before_saving(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    suggestions = page(window, SuggestionsPage)
    assert isinstance(suggestions, SuggestionsPage)
    suggestions.pause.setValue(40)
    assert not window.save_button.isEnabled()
    assert "100-1000" in window.problem.text() or any(
        "100-1000" in row.error.text() for row in suggestions.form.rows
    )


def test_the_apps_page_sets_suggestions_per_app(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    apps = page(window, AppsPage)
    assert isinstance(apps, AppsPage)
    texts = [apps.table.item(row, 2).text() for row in range(apps.table.rowCount())]
    assert any("suggestions off" in text for text in texts)  # the terminals' default rule

"""What the settings panel asks the X server, against a real Xvfb: whether a recorded
hotkey is held by another program, which windows are open, and the window the user clicks."""

from __future__ import annotations

import concurrent.futures
import os
import time
from pathlib import Path

import pytest

# Qt draws nowhere here; the X questions go to the test's own Xvfb.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from anyfill.daemon.desktop.hotkeys import parse_hotkey
from anyfill.daemon.x11.probe import hotkey_is_free, open_windows, pick_window
from anyfill.ui.settings.draft import Draft, load_for_editing
from anyfill.ui.settings.hotkeys import HotkeysPage
from tests.e2e.harness import Daemon, QtTarget, XSession

pytestmark = pytest.mark.desktop


def test_a_combination_another_program_holds_is_reported_taken(x: XSession, daemon: Daemon) -> None:
    # The session's anyfill holds <ctrl>+<alt>+<space>.
    assert hotkey_is_free(parse_hotkey("<ctrl>+<alt>+<space>"), x.display) is False
    free = parse_hotkey("<ctrl>+<alt>+<shift>+z")
    assert hotkey_is_free(free, x.display) is True
    # Probing let go at once: asking again finds it free again.
    assert hotkey_is_free(free, x.display) is True


def test_open_windows_lists_the_applications_on_screen(x: XSession, qt: QtTarget) -> None:
    names = {(w.wm_class, w.instance) for w in open_windows(x.display)}
    assert any("anyfill-target" in (cls, inst) for cls, inst in names), names


def test_the_clicked_window_is_picked(x: XSession, qt: QtTarget) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        picking = pool.submit(pick_window, x.display, 10.0)
        time.sleep(0.5)  # the pointer grab is in place
        x.run("xdotool", "mousemove", "--window", str(qt.wid), "20", "20", "click", "1")
        picked = picking.result(15)
    assert picked is not None
    assert "anyfill-target" in (picked.wm_class, picked.instance), picked


def test_the_hotkeys_page_says_at_once_that_a_recorded_combination_is_taken(
    x: XSession, daemon: Daemon, qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPLAY", x.display)
    path = tmp_path / "config.toml"
    draft = Draft(path, load_for_editing(path))
    page = HotkeysPage(draft)
    qtbot.addWidget(page)
    ctrl_alt = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier
    for key, expected in (
        (Qt.Key.Key_Space, "Ctrl+Alt+Space is taken by another program: choose another"),
        (Qt.Key.Key_Z, "Ctrl+Alt+Z is free"),
        (Qt.Key.Key_F3, "Ctrl+Alt+F-keys switch the virtual terminal"),
    ):
        edit = page.edits["preview"]
        qtbot.mouseClick(edit, Qt.MouseButton.LeftButton)
        qtbot.keyClick(edit, key, ctrl_alt)
        assert page.checks["preview"].text().startswith(expected)
    assert draft.data["hotkeys"]["preview"] == "<ctrl>+<alt>+<f3>"

"""The KWin focus source's pure parts: a report becomes a Target, the script is built
from our bus name, and the KDE session picks KWin as its focus source."""

from __future__ import annotations

import os

import pytest

from anyfill.daemon.atspi.focus import AtspiFocus
from anyfill.daemon.context import ScreenArea
from anyfill.daemon.wayland.compositor import compositor_focus
from anyfill.daemon.wayland.desktop import WaylandWindows
from anyfill.daemon.wayland.kwin import (
    SCRIPT,
    WINDOW_ID_MASK,
    KWinFocus,
    js_string,
    window_place,
    window_target,
)
from anyfill.daemon.wayland.preview_input import popup_route


def test_a_report_becomes_the_target() -> None:
    target = window_target(
        "{554d3524-6062-47ae-853c-1772f030bbc1}", "mousepad", "doc.txt - Mousepad", str(os.getpid())
    )
    assert target is not None
    assert target.window_id == 0x554D3524606247AE853C1772F030BBC1 & WINDOW_ID_MASK
    assert (target.app, target.title, target.pid) == ("mousepad", "doc.txt - Mousepad", os.getpid())
    assert target.process  # read from /proc: this process's name


def test_two_windows_get_two_ids_and_one_window_keeps_its_id() -> None:
    a = window_target("{554d3524-6062-47ae-853c-1772f030bbc1}", "x", "", "1")
    b = window_target("{17932bc9-bb51-4752-8ba9-8f0a1071e312}", "x", "", "1")
    again = window_target("554d3524-6062-47ae-853c-1772f030bbc1", "x", "other title", "1")
    assert a is not None
    assert b is not None
    assert again is not None
    assert a.window_id != b.window_id
    assert a.window_id == again.window_id


def test_no_active_window_is_none() -> None:
    assert window_target("", "", "", "0") is None


def test_an_unknown_pid_is_none() -> None:
    target = window_target("{554d3524-6062-47ae-853c-1772f030bbc1}", "app", "", "0")
    assert target is not None
    assert (target.pid, target.process) == (None, "")


def test_a_malformed_id_is_refused() -> None:
    with pytest.raises(ValueError, match="hexadecimal UUID"):
        window_target("not-a-uuid", "app", "", "1")


def test_a_geometry_report_becomes_the_windows_place() -> None:
    target = window_target("{554d3524-6062-47ae-853c-1772f030bbc1}", "app", "", "1")
    assert target is not None
    report = '{"x": 420.5, "y": 260, "width": 600, "height": 300, "output": "DP-2",'
    report += ' "screen": [1920, 0, 2560, 1440]}'
    place = window_place(target, report)
    assert place is not None
    assert (place.window_id, place.x, place.y) == (target.window_id, 420, 260)
    assert place.screen == ScreenArea("DP-2", 1920, 0, 2560, 1440)


def test_no_geometry_or_no_window_is_no_place() -> None:
    target = window_target("{554d3524-6062-47ae-853c-1772f030bbc1}", "app", "", "1")
    assert window_place(target, "") is None  # an older script's report
    assert window_place(None, '{"x": 1}') is None
    with pytest.raises(KeyError):
        window_place(target, '{"x": 1, "y": 2}')


def test_doctor_names_kwin_as_the_popups_place_on_kde() -> None:
    env = {"XDG_CURRENT_DESKTOP": "KDE"}
    placed = popup_route(env, installed=True, layer_shell=True, kwin=True)
    assert placed.startswith("at the caret (the window's place from KWin")
    fixed = popup_route(env, installed=True, layer_shell=True, kwin=False)
    assert fixed.startswith("at the top of the screen")


def test_the_script_reports_to_our_bus_name_only() -> None:
    text = SCRIPT % {
        "service": js_string(":1.42"),
        "path": js_string("/org/anyfill/KWinFocus"),
        "interface": js_string("org.anyfill.KWinFocus"),
        "member": js_string("Activated"),
    }
    assert 'callDBus(":1.42", "/org/anyfill/KWinFocus"' in text
    # KWin 5 and KWin 6 names both.
    assert "workspace.windowActivated || workspace.clientActivated" in text
    # The surface's place (what AT-SPI's caret is relative to), kept up to date on moves.
    assert "window.bufferGeometry || window.frameGeometry" in text
    assert "window.bufferGeometryChanged.connect(anyfillMoved)" in text
    with pytest.raises(ValueError, match="unexpected character"):
        js_string('bad"name')


def test_a_kde_session_asks_kwin() -> None:
    env = {"XDG_CURRENT_DESKTOP": "KDE", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent"}
    source = compositor_focus(env)
    assert isinstance(source, KWinFocus)
    assert source.name == "KWin scripting (D-Bus)"


def test_kwin_unreachable_is_none_and_says_why() -> None:
    """No session bus at that address: no answer (AT-SPI takes over), and a reason."""
    source = KWinFocus("unix:path=/nonexistent/anyfill-test-bus")
    try:
        assert source.focused() is None
        assert source.unavailable
    finally:
        source.close()


def test_windows_fall_back_to_atspi_when_kwin_does_not_answer() -> None:
    source = KWinFocus("unix:path=/nonexistent/anyfill-test-bus")
    windows = WaylandWindows(source, AtspiFocus())
    try:
        assert windows.route == "KWin scripting (D-Bus)"
        windows.focused()
        assert windows.route.startswith("AT-SPI (KWin did not answer: ")
    finally:
        source.close()

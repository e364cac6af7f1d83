"""doctor's session line: which session this is and what works there."""

from __future__ import annotations

import pytest

from anyfill.daemon.doctor.desktop import Session, session_line


@pytest.mark.parametrize(
    ("environ", "kind"),
    [
        ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, "x11"),
        ({"DISPLAY": ":0"}, "x11"),
        (
            {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"},
            "wayland",
        ),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "wayland"),
        # An X11 session that inherited a stray WAYLAND_DISPLAY (a nested compositor).
        ({"WAYLAND_DISPLAY": "wayland-1", "DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, "x11"),
        ({}, "none"),
        ({"XDG_SESSION_TYPE": "tty"}, "none"),
    ],
)
def test_the_session_kind(environ: dict[str, str], kind: str) -> None:
    assert Session.of(environ).kind == kind


def test_x11_works_fully() -> None:
    status, topic, detail = session_line(Session.of({"DISPLAY": ":1"}), wayland_routes=False)
    assert (status, topic) == ("ok", "session")
    assert "X11 (:1)" in detail


def test_wayland_without_its_routes_says_what_reaches_what() -> None:
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"}
    status, _, detail = session_line(Session.of(env), wayland_routes=False)
    assert status == "warn"
    assert "XWayland (:0)" in detail
    assert "only X11 (XWayland) applications" in detail
    status, _, detail = session_line(
        Session.of({"WAYLAND_DISPLAY": "wayland-0"}), wayland_routes=False
    )
    assert status == "warn"
    assert "no Wayland route" in detail


def test_no_graphical_session_fails_with_the_fix() -> None:
    status, _, detail = session_line(Session.of({}), wayland_routes=True)
    assert status == "fail"
    assert "neither DISPLAY nor WAYLAND_DISPLAY" in detail


def test_wayland_with_its_routes_defers_to_their_lines() -> None:
    line = session_line(Session.of({"WAYLAND_DISPLAY": "wayland-0"}), wayland_routes=True)
    assert line == ("ok", "session", "Wayland (wayland-0): each route on its own line above")

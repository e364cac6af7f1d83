"""Which session and compositor the environment names, chords as keysyms, and Hyprland's
request socket answered the way Hyprland documents ``j/activewindow``."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.daemon.errors import ConfigError
from anyfill.daemon.wayland.compositor import HyprlandFocus, SwayFocus, compositor_focus
from anyfill.daemon.wayland.keysyms import key_name, keysym, parse_chord
from anyfill.daemon.wayland.session import compositor, display_path, is_wayland


@pytest.mark.parametrize(
    ("environ", "wayland"),
    [
        ({"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, True),
        ({"XDG_SESSION_TYPE": "wayland"}, False),  # no display to talk to
        ({"XDG_SESSION_TYPE": "x11", "WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, False),
        ({"WAYLAND_DISPLAY": "wayland-0"}, True),
        ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, False),  # Xwayland desktop, type unset
        ({"DISPLAY": ":0"}, False),
    ],
)
def test_session_kind(environ: dict[str, str], wayland: bool) -> None:
    assert is_wayland(environ) is wayland


@pytest.mark.parametrize(
    ("environ", "kind"),
    [
        ({"SWAYSOCK": "/run/user/1000/sway-ipc.sock"}, "sway"),
        ({"XDG_CURRENT_DESKTOP": "sway"}, "sway"),
        ({"HYPRLAND_INSTANCE_SIGNATURE": "abc"}, "hyprland"),
        ({"XDG_CURRENT_DESKTOP": "KDE"}, "kde"),
        ({"XDG_CURRENT_DESKTOP": "ubuntu:GNOME"}, "gnome"),
        ({"XDG_CURRENT_DESKTOP": "niri"}, "other"),
    ],
)
def test_compositor_kind(environ: dict[str, str], kind: str) -> None:
    assert compositor(environ) == kind


def test_display_path_is_a_name_in_the_runtime_dir_or_a_path() -> None:
    assert display_path({"XDG_RUNTIME_DIR": "/run/user/7", "WAYLAND_DISPLAY": "wayland-1"}) == (
        Path("/run/user/7/wayland-1")
    )
    assert display_path({"WAYLAND_DISPLAY": "/tmp/w/wayland-2"}) == Path("/tmp/w/wayland-2")


def test_chords_as_keysyms() -> None:
    assert parse_chord("<ctrl>+<shift>+<home>") == (["ctrl", "shift"], "home")
    assert (key_name("home"), keysym("home")) == ("Home", 0xFF50)
    assert (key_name("f5"), keysym("f5")) == ("F5", 0xFFC2)
    assert keysym("v") == ord("v")
    assert keysym("✓") == 0x01000000 + ord("✓")
    with pytest.raises(ConfigError):
        parse_chord("<ctrl>+<shift>")


@pytest.fixture
def hyprland(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """Hyprland's request socket: one request per connection, the answer, then close."""
    signature = "testsig"
    path = tmp_path / "hypr" / signature / ".socket.sock"
    path.parent.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    seen: list[bytes] = []
    window = {
        "address": "0x55d0c8a1b2c0",
        "class": "org.gnome.TextEditor",
        "title": "notes.txt",
        "pid": os.getpid(),
    }

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                seen.append(conn.recv(1024))
                conn.sendall(json.dumps(window).encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield tmp_path, seen
    server.close()


def test_hyprland_active_window(hyprland: tuple[Path, list[bytes]]) -> None:
    runtime, seen = hyprland
    source = compositor_focus(
        {"HYPRLAND_INSTANCE_SIGNATURE": "testsig", "XDG_RUNTIME_DIR": str(runtime)}
    )
    assert isinstance(source, HyprlandFocus)
    target = source.focused()
    assert target is not None
    assert seen == [b"j/activewindow"]
    assert target.window_id == 0x55D0C8A1B2C0
    assert (target.app, target.title, target.pid) == (
        "org.gnome.TextEditor",
        "notes.txt",
        os.getpid(),
    )
    assert target.process == Path(f"/proc/{os.getpid()}/comm").read_text().strip()


def test_sway_socket_gone_means_no_focus(tmp_path: Path) -> None:
    source = compositor_focus({"SWAYSOCK": str(tmp_path / "missing.sock")})
    assert isinstance(source, SwayFocus)
    assert source.focused() is None

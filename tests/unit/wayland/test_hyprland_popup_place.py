"""The popup's place on Hyprland, from a socket that answers ``j/activewindow`` and
``j/monitors`` the way Hyprland's request socket documents them (one request per
connection, JSON, then the socket closes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from anyfill.daemon.context import CaretRect, ScreenArea
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.wayland.preview_input import HyprlandPreviewInput, hyprland_socket

WINDOW = {
    "address": "0x55d0c0ffee00",
    "at": [1930, 60],
    "size": [900, 700],
    "monitor": 1,
    "class": "mousepad",
}
MONITORS = [
    {"id": 0, "name": "eDP-1", "x": 0, "y": 0, "width": 1920, "height": 1080, "scale": 1.0},
    {"id": 1, "name": "DP-2", "x": 1920, "y": 0, "width": 3840, "height": 2160, "scale": 2.0},
]


@pytest.fixture
async def hyprland(tmp_path: Path) -> AsyncIterator[tuple[Path, dict[bytes, object]]]:
    answers: dict[bytes, object] = {b"j/activewindow": WINDOW, b"j/monitors": MONITORS}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.read(1024)
        writer.write(json.dumps(answers.get(request, "unknown request")).encode())
        await writer.drain()
        writer.close()

    path = tmp_path / ".socket.sock"
    server = await asyncio.start_unix_server(serve, str(path))
    async with server:
        yield path, answers


async def test_the_caret_is_moved_by_the_windows_place_on_its_monitor(
    hyprland: tuple[Path, dict[bytes, object]],
) -> None:
    path, _ = hyprland
    port = HyprlandPreviewInput(path)
    target = Target(window_id=0x55D0C0FFEE00, app="mousepad")
    caret, screen = await port.locate(target, CaretRect(40, 100, 1, 18))
    assert caret == CaretRect(1970, 160, 1, 18)
    assert screen == ScreenArea("DP-2", 1920, 0, 1920, 1080)  # logical size at scale 2


async def test_another_focused_window_or_a_strange_answer_falls_back_to_the_fixed_place(
    hyprland: tuple[Path, dict[bytes, object]],
) -> None:
    path, answers = hyprland
    port = HyprlandPreviewInput(path)
    other = Target(window_id=0x1234, app="foot")
    assert await port.locate(other, CaretRect(40, 100, 1, 18)) == (None, None)
    answers[b"j/activewindow"] = {}  # no window has the focus
    target = Target(window_id=0x55D0C0FFEE00)
    assert await port.locate(target, CaretRect(40, 100, 1, 18)) == (None, None)


async def test_nothing_listening_falls_back_to_the_fixed_place(tmp_path: Path) -> None:
    port = HyprlandPreviewInput(tmp_path / "absent.sock")
    assert await port.locate(Target(window_id=1), None) == (None, None)


def test_the_request_socket_is_found_by_the_instance_signature(tmp_path: Path) -> None:
    socket_dir = tmp_path / "hypr" / "abc123"
    socket_dir.mkdir(parents=True)
    (socket_dir / ".socket.sock").touch()
    environ = {"XDG_RUNTIME_DIR": str(tmp_path), "HYPRLAND_INSTANCE_SIGNATURE": "abc123"}
    assert hyprland_socket(environ) == socket_dir / ".socket.sock"
    assert hyprland_socket({"XDG_RUNTIME_DIR": str(tmp_path)}) is None

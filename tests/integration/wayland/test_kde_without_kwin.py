"""A KDE session whose bus has no KWin (KWin crashed, or a nested session): the focus guard
says so and uses AT-SPI's active window; doctor's focus line warns. On a private
dbus-daemon; the real KWin is in tests/e2e/test_kde.py."""

from __future__ import annotations

import shutil
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from dbus_fast.aio import MessageBus

from anyfill.daemon.desktop.hotkeys import bindings_from
from anyfill.daemon.doctor.wayland import focus_guard_line
from anyfill.daemon.wayland.desktop import WaylandDesktop
from anyfill.daemon.wayland.kwin import kwin_reachable
from tests.servers.portal import private_bus

pytestmark = pytest.mark.skipif(
    shutil.which("dbus-daemon") is None, reason="needs dbus-daemon (Debian: dbus-daemon)"
)
BINDINGS = bindings_from("<ctrl>+<alt>+<space>", "<ctrl>+<alt>+<enter>", "<ctrl>+<alt>+<backspace>")


@pytest.fixture
async def address() -> AsyncIterator[str]:
    async with private_bus() as found:
        yield found


@pytest.fixture
def display(tmp_path: Path) -> Iterator[Path]:
    """A listening socket where the compositor's would be (only connected to)."""
    path = tmp_path / "wayland-test"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    yield path
    server.close()


def _kde(address: str, display: Path, tmp_path: Path) -> dict[str, str]:
    return {
        "WAYLAND_DISPLAY": str(display),
        "XDG_SESSION_TYPE": "wayland",
        "XDG_CURRENT_DESKTOP": "KDE",
        "XDG_RUNTIME_DIR": str(tmp_path),
        "DBUS_SESSION_BUS_ADDRESS": address,
    }


async def test_doctor_warns_when_kwin_is_not_on_the_bus(
    address: str, display: Path, tmp_path: Path
) -> None:
    bus = await MessageBus(bus_address=address).connect()
    try:
        reachable = await kwin_reachable(bus)
    finally:
        bus.disconnect()
    assert reachable is False
    environ = _kde(address, display, tmp_path)
    assert focus_guard_line(environ, reachable) == (
        "warn",
        "focus guard",
        "AT-SPI's active window (KWin is not on the bus)",
    )
    assert focus_guard_line(environ, True) == ("ok", "focus guard", "KWin scripting (D-Bus)")


async def test_the_guard_falls_back_to_atspi_and_says_why(
    address: str, display: Path, tmp_path: Path
) -> None:
    wayland = WaylandDesktop(
        BINDINGS, lambda action: None, _kde(address, display, tmp_path), portal_address=address
    )
    async with wayland:
        focus = dict(wayland.routes.lines())["focus guard"]
    assert focus.startswith("AT-SPI (KWin did not answer: "), focus
    assert "org.kde.KWin" in focus

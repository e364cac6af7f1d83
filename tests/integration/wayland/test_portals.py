"""The portal routes against a portal service that speaks the documented interfaces
(tests/servers/portal.py) on a private dbus-daemon: hotkeys through GlobalShortcuts, keys
through RemoteDesktop with a kept restore token, the clipboard through the Clipboard portal
with every format and each fetch seen, and a whole paste with the user's clipboard kept."""

from __future__ import annotations

import asyncio
import shutil
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from anyfill.daemon.desktop.hotkeys import Action, bindings_from
from anyfill.daemon.desktop.inject.paste import paste
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop
from anyfill.daemon.errors import DesktopUnavailable
from anyfill.daemon.wayland.desktop import WaylandDesktop
from anyfill.daemon.wayland.portal import shortcuts as shortcuts_module
from anyfill.daemon.wayland.portal.bus import PortalBus
from anyfill.daemon.wayland.portal.remote import PortalClipboard, PortalKeys, RemoteSession
from anyfill.daemon.wayland.portal.shortcuts import PortalHotkeys, xdg_trigger
from tests.servers.portal import private_bus, serve_portal

pytestmark = pytest.mark.skipif(
    shutil.which("dbus-daemon") is None, reason="needs dbus-daemon (Debian: dbus-daemon)"
)
BINDINGS = bindings_from("<ctrl>+<alt>+<space>", "<ctrl>+<alt>+<enter>", "<ctrl>+<alt>+<backspace>")
CTRL, V = 0xFFE3, ord("v")


@pytest.fixture
async def address() -> AsyncIterator[str]:
    async with private_bus() as found:
        yield found


async def _client(address: str) -> PortalBus:
    return await PortalBus(address).connect()


async def _until(check: object, what: str, within: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_hotkeys_are_offered_in_the_shortcuts_spec_form() -> None:
    assert xdg_trigger(BINDINGS["complete"]) == "CTRL+ALT+space"
    assert xdg_trigger(BINDINGS["cancel"]) == "CTRL+ALT+BackSpace"


async def test_bound_shortcut_triggers_the_action(address: str) -> None:
    pressed: list[Action] = []
    async with serve_portal(address) as portal:
        client = await _client(address)
        async with PortalHotkeys(client, BINDINGS, pressed.append) as hotkeys:
            await asyncio.wait_for(hotkeys.bound.wait(), 5)
            (session,) = portal.sessions.values()
            assert session.shortcuts["complete"]["preferred_trigger"] == "CTRL+ALT+space"
            assert set(session.shortcuts) == {"complete", "preview", "cancel"}
            assert hotkeys.triggers["preview"] == "CTRL+ALT+Return"
            portal.activate("complete")
            portal.activate("cancel")
            await _until(lambda: len(pressed) == 2, "two activations")
        assert pressed == ["complete", "cancel"]
        client.close()


async def test_gnome_empty_list_binds_again_and_a_full_list_does_not(address: str) -> None:
    async with serve_portal(address, list_returns_nothing=True) as portal:
        client = await _client(address)
        async with PortalHotkeys(client, BINDINGS, lambda action: None) as hotkeys:
            await asyncio.wait_for(hotkeys.bound.wait(), 5)
            assert set(hotkeys.triggers) == {"complete", "preview", "cancel"}
            (session,) = portal.sessions.values()
            assert session.shortcuts  # bound despite the empty list
        client.close()


async def test_closed_session_is_recreated_and_keeps_working(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shortcuts_module, "RETRY_S", (0.01, 0.05))
    pressed: list[Action] = []
    async with serve_portal(address) as portal:
        client = await _client(address)
        async with PortalHotkeys(client, BINDINGS, pressed.append) as hotkeys:
            await asyncio.wait_for(hotkeys.bound.wait(), 5)
            (first,) = list(portal.sessions)
            closed = portal.sessions[first]
            portal.close_session(first)
            await _until(lambda: len(portal.sessions) == 1, "a new session")
            # A new session at the same path: the token is fixed (KDE keys the user's
            # choice of keys on it).
            assert list(portal.sessions) == [first]
            assert portal.sessions[first] is not closed
            portal.activate("complete")
            await _until(lambda: pressed == ["complete"], "the activation after re-binding")
        client.close()


async def test_remote_desktop_keys_and_the_kept_consent(address: str, tmp_path: Path) -> None:
    token = tmp_path / "state" / "portal-restore-token"
    async with serve_portal(address) as portal:
        client = await _client(address)
        session = RemoteSession(client, token)
        keys = PortalKeys(session, client)
        await keys.press("<ctrl>+v")
        assert portal.keys == [(CTRL, 1), (V, 1), (V, 0), (CTRL, 0)]
        assert portal.dialogs == 1
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        (started,) = portal.sessions.values()
        assert started.persist_mode == 2
        await session.close()
        client.close()

        # A later daemon restores the session with the token: the user is not asked again.
        again = await _client(address)
        later = RemoteSession(again, token)
        assert await PortalKeys(later, again).type_text("ok")
        assert portal.dialogs == 1
        assert portal.keys[-4:] == [(ord("o"), 1), (ord("o"), 0), (ord("k"), 1), (ord("k"), 0)]
        assert not await PortalKeys(later, again).type_text("schöne")  # no keysym guessing
        again.close()


async def test_clipboard_portal_keeps_every_format_and_sees_each_fetch(
    address: str, tmp_path: Path
) -> None:
    user = {"text/plain;charset=utf-8": "user ✓".encode(), "text/html": b"<b>user</b>"}
    async with serve_portal(address) as portal:
        client = await _client(address)
        session = RemoteSession(client, tmp_path / "token")
        async with PortalClipboard(session, client) as clipboard:
            await session.ensure_started()
            portal.copy_elsewhere(user)
            await _until(lambda: clipboard._types == list(user), "the owner change")
            saved = await clipboard.snapshot("clipboard")
            assert {mime: item[2] for mime, item in saved.items.items()} == user
            assert await clipboard.read_text("clipboard", 1.0) == "user ✓"

            offer = await clipboard.offer("clipboard", ClipSnapshot.from_text("middle"))
            assert not offer.fetched.is_set()
            assert await portal.paste("text/plain;charset=utf-8") == b"middle"
            await _until(offer.fetched.is_set, "the fetch to be noted")
            assert offer.fetches == 1
            assert list(portal.done.values()) == [True]

            await clipboard.restore("clipboard", saved)
            assert await portal.paste("text/html") == b"<b>user</b>"
            assert set(portal.offered) == set(user)

            taken = await clipboard.offer("clipboard", ClipSnapshot.from_text("x"))
            portal.copy_elsewhere({"text/plain": b"theirs"})
            await _until(taken.lost.is_set, "the clipboard taken by another app")
        client.close()


async def test_paste_through_the_portals_restores_the_users_clipboard(
    address: str, tmp_path: Path
) -> None:
    """The generic paste (daemon/desktop/inject/paste.py) on the portal ports: the app pastes when
    it gets Ctrl+V, and the user's clipboard comes back only after that fetch."""
    user = {"text/plain;charset=utf-8": b"user clip", "image/png": b"\x89PNG fake"}
    async with serve_portal(address) as portal:
        client = await _client(address)
        session = RemoteSession(client, tmp_path / "token")
        keys = PortalKeys(session, client)
        pasted: list[bytes] = []
        async with PortalClipboard(session, client) as clipboard:
            await session.ensure_started()
            portal.copy_elsewhere(user)
            await _until(lambda: clipboard._types == list(user), "the owner change")
            loop = asyncio.get_running_loop()
            app_paste = portal.keys.append

            def on_key(event: tuple[int, int]) -> None:
                app_paste(event)
                if event == (V, 1) and (CTRL, 1) in portal.keys[-2:]:
                    task = loop.create_task(portal.paste("text/plain;charset=utf-8"))
                    task.add_done_callback(lambda done: pasted.append(done.result()))

            portal.keys = _Recorder(on_key)
            desktop = Desktop(keys, clipboard, windows=None)  # type: ignore[arg-type]
            await paste(
                desktop,
                "completion ✓",
                "<ctrl>+v",
                restore=True,
                restore_timeout_s=2.0,
                guard=lambda: None,
            )
            assert pasted == ["completion ✓".encode()]
            assert await portal.paste("image/png") == b"\x89PNG fake"
            assert await portal.paste("text/plain;charset=utf-8") == b"user clip"
        client.close()


class _Recorder(list[tuple[int, int]]):
    def __init__(self, on_append: object) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, event: tuple[int, int]) -> None:
        super().append(event)
        self._on_append(event)  # type: ignore[operator]


@pytest.fixture
def display(tmp_path: Path) -> Iterator[Path]:
    """A listening socket where the compositor's would be (only connected to, never spoken
    to, by the desktop's display link)."""
    path = tmp_path / "wayland-test"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    yield path
    server.close()


async def test_gnome_session_takes_every_route_through_the_portals(
    address: str, display: Path, tmp_path: Path
) -> None:
    """GNOME: no data-control, no virtual keyboard, no compositor IPC. Hotkeys, keys and the
    clipboard all go through the portals; pressing the portal shortcut reaches the daemon."""
    environ = {
        "WAYLAND_DISPLAY": str(display),
        "XDG_SESSION_TYPE": "wayland",
        "XDG_CURRENT_DESKTOP": "GNOME",
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    pressed: list[Action] = []
    async with serve_portal(address) as portal:
        wayland = WaylandDesktop(
            BINDINGS, pressed.append, environ, portal_address=address, token_path=tmp_path / "t"
        )
        async with wayland as desktop:
            routes = dict(wayland.routes.lines())
            assert routes["hotkeys"].startswith("GlobalShortcuts portal")
            assert routes["keys"].startswith("RemoteDesktop portal")
            assert routes["clipboard"].startswith("Clipboard portal")
            assert portal.dialogs == 0  # nothing asked before a paste needs it
            assert wayland.hotkeys is not None
            await asyncio.wait_for(wayland.hotkeys.bound.wait(), 5)
            portal.activate("preview")
            await _until(lambda: pressed == ["preview"], "the portal shortcut")
            await desktop.keys.press("<shift>+<insert>")
            assert portal.keys == [(0xFFE1, 1), (0xFF63, 1), (0xFF63, 0), (0xFFE1, 0)]
            assert portal.dialogs == 1
            assert not desktop.lost.is_set()


async def test_missing_display_is_a_clear_error(tmp_path: Path) -> None:
    environ = {"WAYLAND_DISPLAY": str(tmp_path / "gone"), "XDG_SESSION_TYPE": "wayland"}
    with pytest.raises(DesktopUnavailable, match="no Wayland display: cannot connect to"):
        async with WaylandDesktop(BINDINGS, lambda action: None, environ):
            pass

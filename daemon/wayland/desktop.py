"""Builds the Wayland desktop: each port from the best route this session offers.

| step       | first choice                          | else                                        |
|------------|---------------------------------------|---------------------------------------------|
| hotkeys    | GlobalShortcuts portal                | ``anyfill trigger`` bound in the desktop    |
| insertion  | AT-SPI EditableText (verified)        | clipboard + paste keys                      |
| clipboard  | data-control, native (pywayland)      | wl-clipboard; Clipboard portal (GNOME)      |
| keys       | virtual keyboard (ours, else wtype)   | RemoteDesktop portal (GNOME, KDE)           |
| focus      | compositor IPC (sway, Hyprland, KWin) | AT-SPI's active window                      |
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from anyfill.daemon.atspi.focus import AtspiFocus
from anyfill.daemon.atspi.insert import AtspiInserter
from anyfill.daemon.desktop.hotkeys import Action, Hotkey, Trigger
from anyfill.daemon.desktop.ports import Clipboard, Desktop, Keys, Paints, Target
from anyfill.daemon.errors import DesktopUnavailable
from anyfill.daemon.wayland.clipboard import WlClipboard, wl_clipboard_installed
from anyfill.daemon.wayland.compositor import FocusSource, compositor_focus
from anyfill.daemon.wayland.connection import open_connection
from anyfill.daemon.wayland.datacontrol import open_native_clipboard
from anyfill.daemon.wayland.keys import NoKeys, WtypeKeys
from anyfill.daemon.wayland.kwin import KWinFocus
from anyfill.daemon.wayland.portal.bus import PortalBus, PortalError
from anyfill.daemon.wayland.portal.remote import PortalClipboard, PortalKeys, RemoteSession
from anyfill.daemon.wayland.portal.shortcuts import PortalHotkeys
from anyfill.daemon.wayland.preview_input import KWinPreviewInput, popup_input, popup_route
from anyfill.daemon.wayland.session import (
    compositor,
    display_path,
    has_data_control,
    has_virtual_keyboard,
)
from anyfill.daemon.wayland.virtual_keyboard import open_virtual_keyboard

log = logging.getLogger("anyfill.wayland")


@dataclass
class Routes:
    """Which route each step takes in this session (logged at start, shown by doctor)."""

    compositor: str
    hotkeys: str = "anyfill trigger (bind it in the desktop's keyboard settings)"
    insertion: str = "paste"
    clipboard: str = "none"
    keys: str = "none"
    focus: str = "none"
    preview: str = "none: the preview hotkey inserts directly"

    def lines(self) -> list[tuple[str, str]]:
        return [
            ("hotkeys", self.hotkeys),
            ("insertion", self.insertion),
            ("clipboard", self.clipboard),
            ("keys", self.keys),
            ("focus guard", self.focus),
            ("preview popup", self.preview),
        ]


class WaylandWindows:
    """The :class:`~anyfill.daemon.desktop.ports.Windows` port: compositor IPC, else AT-SPI."""

    def __init__(self, source: FocusSource | None, fallback: AtspiFocus) -> None:
        self._source = source
        self._fallback = fallback

    @property
    def route(self) -> str:
        if isinstance(self._source, KWinFocus) and self._source.unavailable:
            return f"{self._fallback.name} (KWin did not answer: {self._source.unavailable})"
        if self._source is not None:
            return self._source.name
        if self._fallback.unavailable:
            return "none (" + self._fallback.unavailable + ")"
        return self._fallback.name

    def focused(self) -> Target | None:
        if self._source is not None:
            found = self._source.focused()
            if found is not None or not isinstance(self._source, KWinFocus):
                return found
            if not self._source.unavailable:
                return None  # KWin answered: no window is active
        return self._fallback.focused()

    @property
    def kwin(self) -> KWinFocus | None:
        """The KWin focus source, which also tells where the window is (KDE only)."""
        return self._source if isinstance(self._source, KWinFocus) else None

    def is_password_field(self, target: Target) -> bool | None:
        return None  # the accessibility capture tells

    async def ping(self, window_id: int, timeout_s: float) -> bool | None:
        return None  # no protocol asks an application whether it is idle

    async def watch_paints(self, window_id: int) -> Paints | None:
        return None  # no protocol shows another client's frames


class WaylandDesktop:
    """``async with WaylandDesktop(bindings, on_trigger) as desktop:``."""

    def __init__(
        self,
        bindings: Mapping[Action, Hotkey],
        on_trigger: Trigger,
        environ: Mapping[str, str] | None = None,
        *,
        portal_address: str | None = None,
        token_path: Path | None = None,
    ) -> None:
        self._bindings = bindings
        self._on_trigger = on_trigger
        self._env = dict(os.environ if environ is None else environ)
        self._portal_address = portal_address
        self._token_path = token_path
        self._stack = AsyncExitStack()
        self.routes = Routes(compositor(self._env))
        self.hotkeys: PortalHotkeys | None = None

    async def __aenter__(self) -> Desktop:
        async with AsyncExitStack() as stack:
            desktop = await self._build(stack)
            self._stack = stack.pop_all()
        return desktop

    async def _build(self, stack: AsyncExitStack) -> Desktop:
        kind = compositor(self._env)
        routes = self.routes
        lost = asyncio.Event()
        await stack.enter_async_context(DisplayLink(self._env, lost))
        portal = await _portal(self._portal_address)
        if portal is not None:
            stack.callback(portal.close)
            if await PortalHotkeys.available(portal):
                self.hotkeys = await stack.enter_async_context(
                    PortalHotkeys(portal, self._bindings, self._on_trigger)
                )
                routes.hotkeys = "GlobalShortcuts portal (and anyfill trigger)"
        remote = None
        if portal is not None and await RemoteSession.available(portal):
            remote = RemoteSession(portal, self._token_path)
            stack.push_async_callback(remote.close)

        keys: Keys
        own_keys = await open_virtual_keyboard(stack, self._env)
        if own_keys is not None:
            keys, routes.keys = own_keys, own_keys.name
        elif has_virtual_keyboard(kind) and WtypeKeys.installed():
            keys, routes.keys = WtypeKeys(), "virtual keyboard (wtype)"
        elif remote is not None and portal is not None:
            keys = PortalKeys(remote, portal)
            routes.keys = "RemoteDesktop portal (asks for consent once)"
        else:
            reason = _no_keys_reason(kind)
            keys, routes.keys = NoKeys(reason), f"none: {reason}"

        clipboard: Clipboard
        wayland, why_no_wayland = await open_connection(stack, self._env)
        native, why_not = await open_native_clipboard(stack, wayland, why_no_wayland)
        if native is not None:
            clipboard, routes.clipboard = native, native.route
        elif (has_data_control(kind) or remote is None) and wl_clipboard_installed():
            clipboard = await stack.enter_async_context(WlClipboard())
            routes.clipboard = f"data-control (wl-clipboard; one format restored: {why_not})"
            if not has_data_control(kind):
                routes.clipboard += "; this compositor lacks data-control, wl-copy may flicker"
        elif remote is not None and portal is not None:
            clipboard = await stack.enter_async_context(PortalClipboard(remote, portal))
            routes.clipboard = "Clipboard portal (with the RemoteDesktop session)"
        else:
            raise DesktopUnavailable(
                "no clipboard route on this Wayland session: install wl-clipboard"
            )

        inserter = AtspiInserter()
        direct = None if inserter.unavailable else inserter
        routes.insertion = (
            "AT-SPI EditableText, else paste" if direct is not None else "paste (no AT-SPI)"
        )
        windows = await _focus_windows(self._env, stack)
        routes.focus = windows.route
        preview = await popup_input(self._env, keys, stack, windows.kwin)
        routes.preview = popup_route(
            self._env,
            installed=not isinstance(keys, NoKeys),
            layer_shell=preview is not None,
            kwin=isinstance(preview, KWinPreviewInput),
        )
        for step, route in routes.lines():
            log.info("wayland %s: %s", step, route)
        return Desktop(keys, clipboard, windows, lost=lost, direct=direct, preview_input=preview)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()


class DisplayLink:
    """A connection to the compositor's socket, held for the daemon's life: refused at
    start means no Wayland display; closed later means the session ended (``lost``)."""

    def __init__(self, environ: Mapping[str, str], lost: asyncio.Event) -> None:
        self.path = display_path(environ)
        self._lost = lost
        self._sock: socket.socket | None = None

    async def __aenter__(self) -> DisplayLink:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise DesktopUnavailable(
                f"no Wayland display: cannot connect to {self.path} ({exc.strerror})"
            ) from exc
        sock.setblocking(False)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)
        self._sock = sock
        return self

    def _on_readable(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._lost.set()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()


async def _focus_windows(env: Mapping[str, str], stack: AsyncExitStack) -> WaylandWindows:
    source = compositor_focus(env)
    if isinstance(source, KWinFocus):
        stack.callback(source.close)  # unloads our script from KWin
        await asyncio.to_thread(source.focused)  # load it now, not on the first press
    return WaylandWindows(source, AtspiFocus())


async def _portal(address: str | None) -> PortalBus | None:
    try:
        return await PortalBus(address).connect()
    except PortalError as exc:
        log.info("no session bus, so no portals: %s", exc)
        return None


def _no_keys_reason(kind: str) -> str:
    if kind in ("sway", "hyprland"):
        return "install wtype for paste keys"
    return "no RemoteDesktop portal; install xdg-desktop-portal for your desktop"

"""What ``anyfill doctor`` says on a Wayland session: the route of each step, and what to
install or allow for a better one. Read-only: it asks the portal for its interfaces and
versions, starts no session, shows no dialog."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import socket
from collections.abc import Mapping
from typing import Literal

from anyfill.daemon.doctor.portal import PortalAnswer, ask_interface, portal_advice
from anyfill.daemon.wayland.compositor import compositor_focus
from anyfill.daemon.wayland.datacontrol import native_route
from anyfill.daemon.wayland.kwin import KWinFocus, kwin_reachable
from anyfill.daemon.wayland.preview_input import popup_line
from anyfill.daemon.wayland.session import (
    Compositor,
    compositor,
    display_path,
    has_data_control,
    has_virtual_keyboard,
)
from anyfill.daemon.wayland.virtual_keyboard import VirtualKeyboard, virtual_keyboard_offered

Status = Literal["ok", "warn", "fail"]
Line = tuple[Status, str, str]


async def wayland_report(environ: Mapping[str, str]) -> list[Line]:
    from anyfill.daemon.wayland.portal.bus import PortalBus, PortalError

    kind = compositor(environ)
    asked = {
        name: PortalAnswer(f"org.freedesktop.portal.{name}", 0, "")
        for name in ("GlobalShortcuts", "RemoteDesktop", "Clipboard")
    }
    kwin_on_bus = False
    try:
        portal = await PortalBus(environ.get("DBUS_SESSION_BUS_ADDRESS") or None).connect()
    except PortalError:
        portal = None
    if portal is not None:
        try:
            for name, answer in asked.items():
                asked[name] = await ask_interface(portal.bus, answer.interface)
            kwin_on_bus = kind == "kde" and await kwin_reachable(portal.bus)
        finally:
            portal.close()
    shortcuts, remote, clipboard_portal = (asked[n].version for n in asked)

    def portal_why(name: str) -> str:
        return portal_advice(asked[name], kind, environ, reached=portal is not None)

    path = display_path(environ)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(path))
    except OSError as exc:
        return [("fail", "desktop", f"no Wayland display: cannot connect to {path} ({exc})")]
    lines: list[Line] = [("ok", "desktop", f"Wayland session ({kind}), display {path}")]
    lines.append(
        ("ok", "hotkeys", "GlobalShortcuts portal; 'anyfill trigger' works too")
        if shortcuts
        else (
            "warn",
            "hotkeys",
            "no GlobalShortcuts portal: bind 'anyfill trigger complete' in your desktop's "
            f"keyboard settings (docs/wayland.md); {portal_why('GlobalShortcuts')}",
        )
    )
    if importlib.util.find_spec("gi") is None:
        lines.append(("warn", "insertion", "paste only: install PyGObject for AT-SPI insertion"))
    else:
        lines.append(("ok", "insertion", "AT-SPI EditableText first (no keys, no clipboard)"))
    wl = all(shutil.which(tool) for tool in ("wl-copy", "wl-paste"))
    native, why_not = await asyncio.to_thread(native_route, environ)
    if native:
        lines.append(("ok", "clipboard", native))
    elif has_data_control(kind) and wl:
        lines.append(
            (
                "warn",
                "clipboard",
                "data-control (wl-clipboard): a restore keeps text or one other format, and"
                f" the restore waits a fixed 0.3 s; native route unavailable: {why_not}",
            )
        )
    elif clipboard_portal and remote:
        lines.append(("ok", "clipboard", "Clipboard portal (asks for consent once)"))
    elif wl:
        lines.append(("warn", "clipboard", "wl-clipboard without data-control: may flicker"))
    else:
        lines.append(("fail", "clipboard", "no route: install wl-clipboard"))
    lines.append(await _keys_line(environ, kind, bool(remote), portal_why("RemoteDesktop")))
    lines.append(focus_guard_line(environ, kwin_on_bus))
    kwin = kwin_on_bus and isinstance(compositor_focus(environ), KWinFocus)
    return [*lines, popup_line(environ, kwin=kwin)]


def focus_guard_line(environ: Mapping[str, str], kwin_on_bus: bool) -> Line:
    focus = compositor_focus(environ)
    if isinstance(focus, KWinFocus) and not kwin_on_bus:
        return ("warn", "focus guard", "AT-SPI's active window (KWin is not on the bus)")
    return ("ok", "focus guard", focus.name if focus is not None else "AT-SPI's active window")


async def _keys_line(
    environ: Mapping[str, str], kind: Compositor, remote: bool, why_no_portal: str
) -> Line:
    native = await virtual_keyboard_offered(environ)
    if not native:
        return ("ok", "keys", VirtualKeyboard.name)
    if has_virtual_keyboard(kind) and shutil.which("wtype"):
        return ("ok", "keys", f"virtual keyboard (wtype; not our own: {native})")
    if remote:
        return ("ok", "keys", "RemoteDesktop portal (asks for consent once)")
    if has_virtual_keyboard(kind):
        return ("warn", "keys", "no key route (install wtype): paste fallback unavailable")
    # Say each route tried and why it failed, not a blanket "install xdg-desktop-portal".
    return (
        "warn",
        "keys",
        f"no key route, paste fallback unavailable: our own virtual keyboard: {native}; "
        f"the RemoteDesktop portal: {why_no_portal}",
    )

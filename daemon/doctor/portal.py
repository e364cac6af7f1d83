"""Why the desktop portal offers no interface anyfill wants, in doctor's words: what was
asked, what came back, what is installed. "Install xdg-desktop-portal" is only said when it
is not installed; an installed portal whose desktop backend is not active for the session
(KDE without xdg-desktop-portal-kde running for it) is named as that.

Read-only: it reads the interface's ``version`` property (which may start the portal by bus
activation, as any portal client does) and looks for the programs on disk.
"""

from __future__ import annotations

import asyncio
import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus

from anyfill.daemon.wayland.session import Compositor

__all__ = ["PortalAnswer", "ask_interface", "portal_advice"]

NAME = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"
ASK_TIMEOUT_S = 5.0

#: The portal backend each desktop needs (its executable is xdg-desktop-portal-<name>).
BACKENDS: dict[Compositor, str] = {
    "kde": "kde",
    "gnome": "gnome",
    "hyprland": "hyprland",
    "sway": "wlr",
    "other": "",
}
LIBEXEC = ("/usr/libexec", "/usr/lib/*/libexec", "/usr/lib/xdg-desktop-portal", "/usr/lib")


@dataclass(frozen=True)
class PortalAnswer:
    interface: str
    version: int
    said: str
    """What the portal answered when it offered no version: a D-Bus error, or no answer."""


async def ask_interface(bus: MessageBus, interface: str) -> PortalAnswer:
    message = Message(
        destination=NAME,
        path=PATH,
        interface="org.freedesktop.DBus.Properties",
        member="Get",
        signature="ss",
        body=[interface, "version"],
    )
    try:
        reply = await asyncio.wait_for(bus.call(message), ASK_TIMEOUT_S)
    except TimeoutError:
        return PortalAnswer(interface, 0, f"no answer within {ASK_TIMEOUT_S:.0f} s")
    if reply.message_type == MessageType.ERROR:
        text = str(reply.body[0]) if reply.body else ""
        return PortalAnswer(interface, 0, f"{reply.error_name}{': ' + text if text else ''}")
    value = reply.body[0]
    return PortalAnswer(interface, int(getattr(value, "value", value)), "")


def _installed(program: str) -> str:
    for folder in LIBEXEC:
        for match in sorted(glob.glob(os.path.join(folder, program))):
            if os.access(match, os.X_OK):
                return match
    return ""


def portal_advice(
    answer: PortalAnswer, kind: Compositor, environ: Mapping[str, str], *, reached: bool
) -> str:
    """A sentence: what was asked of the portal, what it said, and what to do about it."""
    short = answer.interface.rsplit(".", 1)[-1]
    if not reached:
        asked = "the session bus could not be reached, so no portal was asked"
    else:
        asked = f"asked the portal for {short}: {answer.said or 'not offered'}"
    portal = _installed("xdg-desktop-portal")
    backend = BACKENDS.get(kind, "")
    backend_program = f"xdg-desktop-portal-{backend}" if backend else ""
    if not portal:
        wanted = f"xdg-desktop-portal and {backend_program}" if backend else "xdg-desktop-portal"
        return f"{asked}; xdg-desktop-portal is not installed: install {wanted}"
    if not backend:
        return (
            f"{asked}; xdg-desktop-portal is installed ({portal}), but no backend of it for "
            f"this desktop offers {short}"
        )
    found = _installed(backend_program)
    if not found:
        return (
            f"{asked}; xdg-desktop-portal is installed ({portal}), its backend for this "
            f"desktop is not: install {backend_program}"
        )
    desktop = environ.get("XDG_CURRENT_DESKTOP", "")
    portals_dir = environ.get("XDG_DESKTOP_PORTAL_DIR", "")
    where = f", XDG_DESKTOP_PORTAL_DIR={portals_dir}" if portals_dir else ""
    known = Path(portals_dir or "/usr/share/xdg-desktop-portal/portals") / f"{backend}.portal"
    listed = "" if known.is_file() else f"; {known} does not exist"
    return (
        f"{asked}; xdg-desktop-portal ({portal}) and {backend_program} ({found}) are "
        f"installed, but {backend_program} is not active for this session "
        f"(XDG_CURRENT_DESKTOP={desktop or 'unset'}{where}{listed}): check "
        "~/.config/xdg-desktop-portal/portals.conf, then 'systemctl --user restart "
        "xdg-desktop-portal' or log out and in"
    )

"""``anyfill doctor``'s desktop checks: the session and what works in it, a tray host, the
clipboard route, the accessibility bus, and autostart. Each says what to do when it is
not ok. Read-only: nothing is grabbed, owned, registered or started.

D-Bus is asked through jeepney (already a dependency of keyring on Linux), X11 through
python-xlib; each probe is bounded by a short timeout.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]
Line = tuple[Status, str, str]

DBUS_TIMEOUT_S = 2.0
SNI_WATCHER = "org.kde.StatusNotifierWatcher"
A11Y_BUS = "org.a11y.Bus"


def desktop_lines(environ: Mapping[str, str]) -> list[Line]:
    """The desktop checks in the order a user reads them."""
    if not sys.platform.startswith("linux"):
        return [autostart_line(environ)]
    session = Session.of(environ)
    lines = [session_line(session, wayland_routes=_wayland_routes_present())]
    lines.append(tray_line(session, environ))
    clipboard = clipboard_line(session)
    if clipboard is not None:
        lines.append(clipboard)
    lines.append(accessibility_bus_line(environ))
    lines.append(autostart_line(environ))
    return lines


@dataclass(frozen=True)
class Session:
    kind: str
    """``x11``, ``wayland`` or ``none`` (a console, ssh, a service without a desktop)."""
    display: str
    wayland_display: str

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> Session:
        from anyfill.daemon.wayland.session import is_wayland

        display = environ.get("DISPLAY", "")
        wayland = environ.get("WAYLAND_DISPLAY", "")
        if is_wayland(environ):  # the same answer as the desktop the daemon opens
            kind = "wayland"
        elif display:
            kind = "x11"
        else:
            kind = "none"
        return cls(kind, display, wayland)


def _wayland_routes_present() -> bool:
    """The Wayland routes (their own doctor lines) are part of this installation."""
    return importlib.util.find_spec("anyfill.daemon.wayland") is not None


def session_line(session: Session, *, wayland_routes: bool) -> Line:
    """``wayland_routes``: this installation has the Wayland routes (they add their lines)."""
    if session.kind == "x11":
        return (
            "ok",
            "session",
            f"X11 ({session.display}): hotkeys, capture and insertion reach every application",
        )
    if session.kind == "wayland":
        if wayland_routes:
            return (
                "ok",
                "session",
                f"Wayland ({session.wayland_display}): each route on its own line above",
            )
        xwayland = f" with XWayland ({session.display})" if session.display else ""
        reach = (
            "the X11 route reaches only X11 (XWayland) applications, and only while one "
            "has the focus"
            if session.display
            else "this version has no Wayland route"
        )
        return (
            "warn",
            "session",
            f"Wayland{xwayland}: {reach}; log in to an X11 session for every application",
        )
    return (
        "fail",
        "session",
        "no graphical session: neither DISPLAY nor WAYLAND_DISPLAY is set "
        "(run anyfill from your desktop session, or import them into the service manager)",
    )


def tray_line(session: Session, environ: Mapping[str, str]) -> Line:
    """A host for the tray icon: a StatusNotifierItem watcher with a host (KDE, GNOME with
    the AppIndicator extension, most panels), or an XEmbed system tray (X11 panels)."""
    sni = _sni_host(environ)
    if sni is True:
        return ("ok", "tray", f"StatusNotifierItem host ({SNI_WATCHER})")
    xembed = _xembed_tray(session.display) if session.display else None
    if xembed:
        return ("ok", "tray", f"XEmbed system tray on {session.display} ({xembed})")
    return (
        "warn",
        "tray",
        "no system tray host: anyfill works without its icon ('anyfill status', "
        "'anyfill pause'); GNOME: install the 'AppIndicator and KStatusNotifierItem "
        "Support' extension, other desktops: add a tray/notification area to a panel",
    )


def clipboard_line(session: Session) -> Line | None:
    if session.kind == "wayland" and _wayland_routes_present():
        return None  # the Wayland report names its own clipboard route
    if not session.display:
        return None  # the session line already says there is no desktop
    manager = _selection_owner_name(session.display, "CLIPBOARD_MANAGER")
    where = "X11 applications only: " if session.kind == "wayland" else ""
    detail = (
        f"{where}X11 selections, served by anyfill itself; the user's clipboard is "
        "restored after each paste"
    )
    if manager:
        detail += f"; a clipboard manager ({manager}) may keep a copy of each completion"
    return ("ok" if session.kind == "x11" else "warn", "clipboard", detail)


def accessibility_bus_line(environ: Mapping[str, str]) -> Line:
    """AT-SPI: the accessibility bus runs, and whether toolkits are told to expose text.
    Asked without auto-start: doctor starts nothing."""
    try:
        with _session_bus(environ) as bus:
            if not _name_has_owner(bus, A11Y_BUS):
                return (
                    "warn",
                    "accessibility bus",
                    f"no accessibility bus ({A11Y_BUS} is not running): capture and "
                    "insertion use keys and the clipboard (install at-spi2-core; desktops "
                    "start it with the session)",
                )
            address = _call(bus, "/org/a11y/bus", A11Y_BUS, "GetAddress", A11Y_BUS)
            enabled = _property(bus, "/org/a11y/bus", "org.a11y.Status", "IsEnabled", A11Y_BUS)
    except DBusUnavailable as exc:
        return (
            "warn",
            "accessibility bus",
            f"{exc}: capture and insertion use keys and the clipboard",
        )
    if enabled is False:
        return (
            "warn",
            "accessibility bus",
            f"{address} answers, but accessibility is off (org.a11y.Status.IsEnabled): Qt "
            "and Chromium apps expose no text; turn on a screen reader setting, or "
            "'gsettings set org.gnome.desktop.interface toolkit-accessibility true'",
        )
    return ("ok", "accessibility bus", f"{address}")


def autostart_line(environ: Mapping[str, str]) -> Line:
    from anyfill.daemon.autostart.manager import status
    from anyfill.daemon.errors import AnyfillError

    try:
        found = status(environ)
    except (AnyfillError, OSError) as exc:
        return ("warn", "autostart", f"cannot tell: {exc}")
    if not found.entries:
        return ("ok", "autostart", "off ('anyfill autostart enable' starts anyfill at log-in)")
    working = [entry for entry in found.entries if not entry.problem]
    if working:
        entry = working[0]
        if len(working) > 1:
            return ("warn", "autostart", found.notes[0] if found.notes else "two entries")
        detail = f"{entry.method} ({entry.location})"
        return ("ok", "autostart", f"{detail}; {entry.note}" if entry.note else detail)
    entry = found.entries[0]
    return (
        "warn",
        "autostart",
        f"{entry.method} ({entry.location}) does not start: {entry.problem}",
    )


# --- D-Bus ---------------------------------------------------------------------------


class DBusUnavailable(Exception):
    """The session bus or the service did not answer; the message says which."""


class _SessionBus:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self.address = environ.get("DBUS_SESSION_BUS_ADDRESS", "")
        self.connection: Any = None

    def __enter__(self) -> Any:
        if not self.address:
            raise DBusUnavailable("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset)")
        from jeepney.io.blocking import open_dbus_connection

        try:
            self.connection = open_dbus_connection(self.address, auth_timeout=DBUS_TIMEOUT_S)
        except (OSError, ValueError, KeyError, TimeoutError) as exc:
            raise DBusUnavailable(f"cannot reach the D-Bus session bus ({exc})") from exc
        return self.connection

    def __exit__(self, *exc: object) -> None:
        if self.connection is not None:
            self.connection.close()


def _session_bus(environ: Mapping[str, str]) -> _SessionBus:
    return _SessionBus(environ)


def _no_auto_start(message: Any) -> Any:
    """A call that never makes the bus start (activate) the service it asks."""
    from jeepney.low_level import MessageFlag

    message.header.flags |= MessageFlag.no_auto_start
    return message


def _name_has_owner(bus: Any, name: str) -> bool:
    from jeepney.bus_messages import message_bus
    from jeepney.wrappers import unwrap_msg

    reply = bus.send_and_get_reply(message_bus.NameHasOwner(name), timeout=DBUS_TIMEOUT_S)
    return bool(unwrap_msg(reply)[0])


def _call(bus: Any, path: str, interface: str, method: str, name: str) -> Any:
    from jeepney import DBusAddress, new_method_call
    from jeepney.wrappers import DBusErrorResponse, unwrap_msg

    address = DBusAddress(path, bus_name=name, interface=interface)
    try:
        message = _no_auto_start(new_method_call(address, method))
        reply = bus.send_and_get_reply(message, timeout=DBUS_TIMEOUT_S)
        return unwrap_msg(reply)[0]
    except DBusErrorResponse as exc:
        raise DBusUnavailable(f"{name} does not answer ({exc.name})") from exc
    except TimeoutError as exc:
        raise DBusUnavailable(f"{name} did not answer within {DBUS_TIMEOUT_S:g} s") from exc


def _property(bus: Any, path: str, interface: str, prop: str, name: str = "") -> Any:
    from jeepney import DBusAddress, Properties
    from jeepney.wrappers import DBusErrorResponse, unwrap_msg

    address = DBusAddress(path, bus_name=name or interface.rsplit(".", 1)[0], interface=interface)
    try:
        message = _no_auto_start(Properties(address).get(prop))
        reply = bus.send_and_get_reply(message, timeout=DBUS_TIMEOUT_S)
        _signature, value = unwrap_msg(reply)[0]
    except (DBusErrorResponse, TimeoutError):
        return None
    return value


def _sni_host(environ: Mapping[str, str]) -> bool | None:
    """True: a watcher with a host; False: none; None: no session bus to ask."""
    try:
        with _session_bus(environ) as bus:
            if not _name_has_owner(bus, SNI_WATCHER):
                return False
            host = _property(
                bus,
                "/StatusNotifierWatcher",
                SNI_WATCHER,
                "IsStatusNotifierHostRegistered",
                SNI_WATCHER,
            )
            return bool(host)
    except (DBusUnavailable, TimeoutError):
        return None


# --- X11 -----------------------------------------------------------------------------


def _xembed_tray(display_name: str) -> str | None:
    """The window name of the XEmbed tray's owner on the default screen, or None."""
    return _selection_owner_name(display_name, "_NET_SYSTEM_TRAY_S{screen}")


def _selection_owner_name(display_name: str, selection: str) -> str | None:
    from Xlib import X, display, error

    try:
        connection = display.Display(display_name)
    except (error.DisplayError, error.ConnectionClosedError, OSError):
        return None
    try:
        atom = connection.intern_atom(selection.format(screen=connection.get_default_screen()))
        owner = connection.get_selection_owner(atom)
        if getattr(owner, "id", X.NONE) == X.NONE:
            return None
        name = _window_name(connection, owner)
        return name or f"window 0x{owner.id:x}"
    except error.XError:
        return None
    finally:
        connection.close()


def _window_name(connection: Any, window: Any) -> str:
    from Xlib import error

    try:
        wm_class = window.get_wm_class()
        if wm_class:
            return str(wm_class[-1])
        name = window.get_wm_name()
    except error.XError:
        return ""
    return str(name or "")

"""A real KDE Plasma compositor for the end-to-end tests: KWin (``kwin_wayland --virtual``,
headless) on a private session bus where xdg-desktop-portal with xdg-desktop-portal-kde
and the AT-SPI bus are activated, as in a Plasma session.

KWin runs as root here (unlike sway), but Debian gives ``/usr/bin/kwin_wayland`` the file
capability ``cap_sys_resource`` and a container whose bounding set lacks it cannot execute
that file (EPERM): a plain copy, without the capability, is run instead.

The tests look at KWin through its own scripting interface, not through anyfill's code: a
script prints what it sees (``print`` goes to KWin's log) or activates a window.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from tests.e2e.harness import wait_until
from tests.e2e.wayland import WaylandSession

KWIN = shutil.which("kwin_wayland")
TOOLS = ("kwin_wayland", "dbus-daemon", "gdbus", "wl-copy", "wl-paste")
PORTAL_KDE = Path("/usr/lib/x86_64-linux-gnu/libexec/xdg-desktop-portal-kde")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
UNUSABLE = f"KDE tests need {', '.join(MISSING)} (Debian: .ci/apt-packages.txt)" if MISSING else ""
SOCKET = "anyfill-kde"
_scripts = itertools.count(1)


class KdeSession(WaylandSession):
    """``with KdeSession.start() as kde:`` KWin headless, its bus, helpers."""

    portal_backend = True
    """False: xdg-desktop-portal finds no backend (an empty portals folder), as on a Plasma
    session where xdg-desktop-portal-kde is installed but not active for it."""

    def _boot(self, bindings: str) -> None:
        kwin = self.workdir / "kwin_wayland"
        shutil.copyfile(str(KWIN), kwin)  # without the file capability (see above)
        kwin.chmod(0o755)
        base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        base.pop("NO_AT_BRIDGE", None)
        base.pop("DBUS_SESSION_BUS_ADDRESS", None)
        base.update(
            HOME=str(self.workdir),
            XDG_RUNTIME_DIR=str(self.run_dir),
            XDG_CONFIG_HOME=str(self.workdir / "config"),
            XDG_STATE_HOME=str(self.workdir / "state"),
            XDG_CACHE_HOME=str(self.workdir / "cache"),
            GSETTINGS_BACKEND="memory",
            # What a Plasma session sets; services activated on the bus inherit it.
            WAYLAND_DISPLAY=str(self.run_dir / SOCKET),
            XDG_SESSION_TYPE="wayland",
            XDG_CURRENT_DESKTOP="KDE",
            KDE_FULL_SESSION="true",
            KDE_SESSION_VERSION="5",
            QT_QPA_PLATFORM="wayland",
            GDK_BACKEND="wayland",
            QT_LINUX_ACCESSIBILITY_ALWAYS_ON="1",
        )
        if not self.portal_backend:
            (self.workdir / "portals").mkdir()
            base["XDG_DESKTOP_PORTAL_DIR"] = str(self.workdir / "portals")
        address = self._session_bus(base)
        self.env = {**base, "DBUS_SESSION_BUS_ADDRESS": address}
        self.spawn(
            [str(kwin), "--virtual", "--width", "1280", "--height", "800",
             "--socket", SOCKET, "--no-lockscreen", "--no-kactivities"],
            "kwin.log",
            env={**self.env, "QT_QPA_PLATFORM": "offscreen", "WAYLAND_DISPLAY": ""},
        )  # fmt: skip
        wait_until((self.run_dir / SOCKET).exists, 30, "KWin to start")
        wait_until(self._kwin_on_bus, 20, "KWin on the session bus")

    def _kwin_on_bus(self) -> bool:
        out = self.run(
            "gdbus", "call", "--session", "--dest", "org.freedesktop.DBus",
            "--object-path", "/org/freedesktop/DBus",
            "--method", "org.freedesktop.DBus.NameHasOwner", "org.kde.KWin",
            check=False,
        )  # fmt: skip
        return "true" in out

    # -- KWin, seen through its scripting interface ---------------------------------------

    def script(self, body: str) -> list[str]:
        """Run a KWin script; the lines it printed with ``say(text)``."""
        number = next(_scripts)
        marker = f"anyfill-test-{os.getpid()}-{number}"
        path = self.workdir / f"{marker}.js"
        path.write_text(
            f"function say(text) {{ print({json.dumps(marker)} + ' ' + text); }}\n"
            f"{body}\nsay('done');\n",
            encoding="utf-8",
        )
        log = self.workdir / "kwin.log"
        self.dbus("/Scripting", "org.kde.kwin.Scripting.loadScript", str(path), marker)
        self.dbus("/Scripting", "org.kde.kwin.Scripting.start")
        try:
            wait_until(lambda: f"{marker} done" in log.read_text(errors="replace"), 10, marker)
        finally:
            self.dbus("/Scripting", "org.kde.kwin.Scripting.unloadScript", marker)
        prefix = f"{marker} "
        return [
            line.split(prefix, 1)[1]
            for line in log.read_text(errors="replace").splitlines()
            if prefix in line and not line.endswith(f"{marker} done")
        ]

    def dbus(self, path: str, method: str, *args: str, dest: str = "org.kde.KWin") -> str:
        return self.run(
            "gdbus", "call", "--session", "--dest", dest, "--object-path", path,
            "--method", method, *args,
        )  # fmt: skip

    def kwin_windows(self) -> list[dict[str, Any]]:
        """Every normal window: KWin's id, caption, resource class, pid, active or not."""
        lines = self.script(
            "const active = workspace.activeWindow !== undefined ? workspace.activeWindow"
            " : workspace.activeClient;\n"
            "const all = workspace.windowList ? workspace.windowList() : workspace.clientList();\n"
            "for (const w of all) if (w.normalWindow) say(JSON.stringify({"
            "id: String(w.internalId), caption: String(w.caption),"
            " app: String(w.resourceClass), pid: w.pid, active: w === active}));"
        )
        return [json.loads(line) for line in lines]

    def active_window(self) -> dict[str, Any]:
        return next((w for w in self.kwin_windows() if w["active"]), {})

    def activate(self, window_id: str) -> None:
        """Give the window the focus, as a click on it would."""
        self.script(
            "const all = workspace.windowList ? workspace.windowList() : workspace.clientList();\n"
            f"for (const w of all) if (String(w.internalId) === {json.dumps(window_id)}) {{\n"
            "  if (workspace.activeWindow !== undefined) workspace.activeWindow = w;\n"
            "  else workspace.activeClient = w;\n}"
        )
        wait_until(lambda: self.active_window().get("id") == window_id, 5, "the focus to move")

    def wait_new_active(self, known: set[str], what: str) -> dict[str, Any]:
        def fresh() -> dict[str, Any]:
            window = self.active_window()
            return window if window.get("id") not in known | {None} else {}

        return wait_until(fresh, 20, what)

    def shortcut_components(self) -> str:
        return self.dbus(
            "/kglobalaccel", "org.kde.KGlobalAccel.allMainComponents", dest="org.kde.kglobalaccel"
        )

    def invoke_shortcut(self, component: str, action: str) -> None:
        """What KDE does when the user presses the shortcut's keys (kglobalaccel)."""
        self.dbus(
            f"/component/{component}",
            "org.kde.kglobalaccel.Component.invokeShortcut",
            action,
            dest="org.kde.kglobalaccel",
        )

    def wait_log(self, name: str, text: str, within: float = 10) -> None:
        path = self.workdir / name
        deadline = time.monotonic() + within
        while text not in path.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in {name}")
            time.sleep(0.05)


# -- a keyboard for the test: KDE's RemoteDesktop portal ------------------------------------

PORTAL = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
REMOTE = "org.freedesktop.portal.RemoteDesktop"
KEYSYMS = {"ctrl": 0xFFE3, "alt": 0xFFE9, "shift": 0xFFE1, "space": 0x20, "Return": 0xFF0D}


def press_keys(address: str, *names: str) -> None:
    """Press the keys in order and release them in reverse, as a person would, through
    KDE's RemoteDesktop portal (KWin's fake input: the keys go through KWin's own input
    handling, its global shortcuts included). Written here on dbus-fast, independent of
    anyfill's portal code; Plasma 5.27 asks no consent of an unsandboxed client."""
    asyncio.run(_press(address, [KEYSYMS[name] for name in names]))


async def _press(address: str, keysyms: list[int]) -> None:
    bus = await MessageBus(bus_address=address, bus_type=BusType.SESSION).connect()
    sender = (bus.unique_name or "").lstrip(":").replace(".", "_")
    try:
        created = await _request(bus, sender, "CreateSession", "", [], {
            "session_handle_token": Variant("s", "anyfilltestkeys"),
        })  # fmt: skip
        session = str(created["session_handle"].value)
        await _request(bus, sender, "SelectDevices", "o", [session], {"types": Variant("u", 1)})
        started = await _request(bus, sender, "Start", "os", [session, ""], {})
        assert int(started["devices"].value) & 1, started
        events = [(sym, 1) for sym in keysyms] + [(sym, 0) for sym in reversed(keysyms)]
        for sym, state in events:
            await _call(bus, REMOTE, "NotifyKeyboardKeysym", "oa{sv}iu", [session, {}, sym, state])
        await _call(bus, "org.freedesktop.portal.Session", "Close", "", [], path=session)
    finally:
        bus.disconnect()


async def _request(
    bus: MessageBus,
    sender: str,
    member: str,
    signature: str,
    body: list[Any],
    options: dict[str, Variant],
) -> dict[str, Variant]:
    token = f"anyfilltest{next(_scripts)}"
    handle = f"{PORTAL_PATH}/request/{sender}/{token}"
    answer: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()

    def on_message(message: Message) -> None:
        if message.path == handle and message.member == "Response" and not answer.done():
            answer.set_result(list(message.body))

    bus.add_message_handler(on_message)
    rule = f"type='signal',interface='org.freedesktop.portal.Request',path='{handle}'"
    await _call(bus, "org.freedesktop.DBus", "AddMatch", "s", [rule],
                path="/org/freedesktop/DBus", destination="org.freedesktop.DBus")  # fmt: skip
    await _call(bus, REMOTE, member, signature + "a{sv}",
                [*body, {**options, "handle_token": Variant("s", token)}])  # fmt: skip
    code, results = await asyncio.wait_for(answer, 10)
    bus.remove_message_handler(on_message)
    assert code == 0, f"RemoteDesktop.{member} answered {code}"
    return dict(results)


async def _call(
    bus: MessageBus,
    interface: str,
    member: str,
    signature: str,
    body: list[Any],
    *,
    path: str = PORTAL_PATH,
    destination: str = PORTAL,
) -> Message:
    reply = await bus.call(
        Message(destination=destination, path=path, interface=interface, member=member,
                signature=signature, body=body)
    )  # fmt: skip
    assert reply is not None
    assert reply.message_type == MessageType.METHOD_RETURN, reply.body
    return reply

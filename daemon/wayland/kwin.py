"""The focused window on KDE Plasma, from KWin itself through its D-Bus scripting interface.

KWin has no socket IPC like sway's, but it loads scripts over D-Bus
(``org.kde.kwin.Scripting.loadScript``) and a script may call D-Bus methods
(``callDBus``). Our small script reports the active window (KWin's internal id, resource
class, caption, pid, and its place and output for the preview popup) to this process at
load, on every activation and when the active window moves; we keep the last report.

A report can still be in flight when the focus guard asks. Before answering, one method
call goes to KWin (``isScriptLoaded``, which also tells that the script still runs): KWin
answers it on the thread that ran the script, after any report that script sent before,
and the bus keeps one sender's messages in order, so the reply comes after those
reports. One round trip, about a millisecond.

The guard's questions are synchronous; the bus connection runs on a private thread with
its own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus

from anyfill.daemon.context import ScreenArea
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.desktop.process import process_name

log = logging.getLogger("anyfill.wayland.kwin")

BUS = "org.freedesktop.DBus"
BUS_PATH = "/org/freedesktop/DBus"
KWIN = "org.kde.KWin"
SCRIPTING_PATH = "/Scripting"
SCRIPTING = "org.kde.kwin.Scripting"
SCRIPT_INTERFACE = "org.kde.kwin.Script"
PLUGIN = f"anyfill-focus-{os.getpid()}"
"""The script's name in KWin, one per daemon (a second daemon must not replace ours)."""
REPORT_PATH = "/org/anyfill/KWinFocus"
REPORT_INTERFACE = "org.anyfill.KWinFocus"
REPORT_MEMBER = "Activated"
TIMEOUT_S = 0.5
FIRST_REPORT_S = 2.0
"""KWin reads and runs a loaded script asynchronously; the first report follows."""
RETRY_S = 30.0
"""After a failure, AT-SPI answers for this long before KWin is asked again."""

WINDOW_ID_MASK = (1 << 63) - 1
"""KWin's ids are UUIDs; 63 of their bits keep window ids a signed 64-bit number."""

T = TypeVar("T")

# KWin 5 names the active window activeClient/clientActivated; KWin 6 activeWindow/
# windowActivated. The script uses whichever this KWin has.
SCRIPT = """\
let anyfillWindow = null;
function anyfillGeometry(window) {
    const g = window.bufferGeometry || window.frameGeometry;
    const area = workspace.clientArea(KWin.FullScreenArea, window);
    return JSON.stringify({
        x: g.x, y: g.y, width: g.width, height: g.height,
        output: window.output ? String(window.output.name) : "",
        screen: [area.x, area.y, area.width, area.height]});
}
function anyfillReport(window) {
    callDBus(%(service)s, %(path)s, %(interface)s, %(member)s,
        window ? String(window.internalId) : "",
        window ? String(window.resourceClass) : "",
        window ? String(window.caption) : "",
        window ? String(window.pid) : "0",
        window ? anyfillGeometry(window) : "");
}
function anyfillMoved() {
    anyfillReport(anyfillWindow);
}
function anyfillActivated(window) {
    if (anyfillWindow && anyfillWindow.bufferGeometryChanged)
        anyfillWindow.bufferGeometryChanged.disconnect(anyfillMoved);
    anyfillWindow = window;
    if (window && window.bufferGeometryChanged)
        window.bufferGeometryChanged.connect(anyfillMoved);
    anyfillReport(window);
}
(workspace.windowActivated || workspace.clientActivated).connect(anyfillActivated);
anyfillActivated(workspace.activeWindow !== undefined ? workspace.activeWindow
                                                      : workspace.activeClient);
"""


class KWinError(Exception):
    pass


@dataclass(frozen=True)
class WindowPlace:
    """Where KWin shows a window: its surface's top-left corner (the buffer, which is what
    AT-SPI's window-relative coordinates are relative to, not the decoration) and its
    output."""

    window_id: int
    x: int
    y: int
    screen: ScreenArea


class KWinFocus:
    """The focus source on KDE: KWin's active window, reported by our KWin script."""

    name = "KWin scripting (D-Bus)"

    def __init__(self, bus_address: str | None = None) -> None:
        self._address = bus_address
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._bus: MessageBus | None = None
        self._kwin_owner = ""
        self._script: Path | None = None
        self._active: Target | None = None
        self._place: WindowPlace | None = None
        self._reported = asyncio.Event()
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self.unavailable = ""
        """Why KWin cannot answer just now ('' when it can): AT-SPI answers meanwhile."""

    # -- the synchronous side, for the focus guard ---------------------------------------

    def focused(self) -> Target | None:
        with self._lock:
            loop = self._ensure_thread()
            if self.unavailable and loop.time() < self._retry_at:
                return None
            try:
                return self._run(self._query(), FIRST_REPORT_S + TIMEOUT_S)
            except (KWinError, OSError, TimeoutError, ValueError) as exc:
                if not self.unavailable:
                    log.warning("KWin did not tell the active window (%s); using AT-SPI", exc)
                self.unavailable = str(exc) or type(exc).__name__
                self._retry_at = loop.time() + RETRY_S
                with contextlib.suppress(OSError, TimeoutError):
                    self._run(self._disconnect(), TIMEOUT_S)
                return None

    def place(self) -> WindowPlace | None:
        """The active window's place, as of KWin's last report (one round trip first, as
        :meth:`focused`); None when KWin cannot tell."""
        if self.focused() is None:
            return None
        with self._lock:
            place = self._place
            if place is None or place.screen.name:
                return place
            try:  # KWin 5 scripts do not name the window's output; KWin's D-Bus does
                named = self._run(self._active_output(), TIMEOUT_S)
            except (KWinError, OSError, TimeoutError) as exc:
                log.debug("no output name from KWin: %s", exc)
                return place
            screen = ScreenArea(named, *_rect(place.screen))
            return WindowPlace(place.window_id, place.x, place.y, screen)

    async def _active_output(self) -> str:
        reply = await self._call("activeOutputName", path="/KWin", interface=KWIN)
        return str(reply[0])

    def close(self) -> None:
        with self._lock:
            if self._loop is None or self._thread is None:
                return
            with contextlib.suppress(OSError, TimeoutError):
                self._run(self._disconnect(unload=True), TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(2)
            self._loop.close()
            self._loop = self._thread = None

    def _ensure_thread(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="anyfill-kwin-focus", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _run(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError("KWin did not answer in time") from None

    # -- on the private loop ---------------------------------------------------------------

    async def _query(self) -> Target | None:
        if self._bus is None:
            await self._load()
        elif not await self._script_running():
            log.info("KWin no longer runs our script (restarted?); loading it again")
            await self._disconnect()
            await self._load()
        self.unavailable = ""
        return self._active

    async def _load(self) -> None:
        bus = MessageBus(bus_address=self._address, bus_type=BusType.SESSION)
        self._bus = await asyncio.wait_for(bus.connect(), TIMEOUT_S)
        self._bus.add_message_handler(self._on_message)
        owner = await self._call(
            "GetNameOwner", "s", [KWIN], destination=BUS, path=BUS_PATH, interface=BUS
        )
        self._kwin_owner = str(owner[0])
        # A script left by an earlier process with our pid reports to a name that is gone.
        await self._call("unloadScript", "s", [PLUGIN])
        self._script = self._write_script(self._bus.unique_name or "")
        self._reported = asyncio.Event()
        script_id = await self._call("loadScript", "ss", [str(self._script), PLUGIN])
        if int(script_id[0]) < 0:
            raise KWinError("KWin refused to load the focus script")
        await self._run_script(int(script_id[0]))
        try:
            await asyncio.wait_for(self._reported.wait(), FIRST_REPORT_S)
        except TimeoutError:
            # KWin 6 numbers a script by the count of loaded ones: after unloads our number
            # can be another script's, whose object took the path. start() runs ours too.
            await self._call("start")
            await asyncio.wait_for(self._reported.wait(), FIRST_REPORT_S)
        log.info("KWin reports the active window to anyfill (script %s)", script_id[0])

    async def _run_script(self, script_id: int) -> None:
        """Run our script only: its object is /Scripting/ScriptN on KWin 6, /N on KWin 5.
        ``Scripting.start`` would also re-read the user's KWin script settings."""
        for path in (f"/Scripting/Script{script_id}", f"/{script_id}"):
            try:
                await self._call(
                    "run", path=path, interface=SCRIPT_INTERFACE, wait_s=FIRST_REPORT_S
                )
            except KWinError as exc:
                log.debug("running the script at %s: %s", path, exc)
                continue
            return
        await self._call("start")  # runs every loaded script that is not running yet

    async def _script_running(self) -> bool:
        loaded = await self._call("isScriptLoaded", "s", [PLUGIN])
        return bool(loaded[0])

    async def _disconnect(self, *, unload: bool = False) -> None:
        bus, self._bus = self._bus, None
        self._active = self._place = None
        if bus is None:
            return
        if unload:
            try:
                await self._call("unloadScript", "s", [PLUGIN], bus=bus)
            except (KWinError, OSError, TimeoutError) as exc:
                log.debug("unloading the KWin script: %s", exc)
        bus.disconnect()
        if self._script is not None:
            self._script.unlink(missing_ok=True)
            self._script = None

    async def _call(
        self,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        *,
        destination: str = KWIN,
        path: str = SCRIPTING_PATH,
        interface: str = SCRIPTING,
        bus: MessageBus | None = None,
        wait_s: float = TIMEOUT_S,
    ) -> list[Any]:
        bus = bus or self._bus
        if bus is None:
            raise KWinError("not connected to the session bus")
        message = Message(
            destination=destination,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=body or [],
        )
        reply = await asyncio.wait_for(bus.call(message), wait_s)
        if reply is None or reply.message_type == MessageType.ERROR:
            detail = reply.body[0] if reply is not None and reply.body else ""
            raise KWinError(f"{interface}.{member}: {detail or 'no reply'}")
        return list(reply.body)

    def _on_message(self, message: Message) -> bool:
        if (
            message.message_type != MessageType.METHOD_CALL
            or message.path != REPORT_PATH
            or message.interface != REPORT_INTERFACE
        ):
            return False
        bus = self._bus
        if bus is None:
            return True  # disconnecting: the report is moot
        if message.sender != self._kwin_owner or message.member != REPORT_MEMBER:
            # Only KWin may tell us where the focus is.
            bus.send(
                Message.new_error(message, "org.freedesktop.DBus.Error.AccessDenied", "not KWin")
            )
            return True
        bus.send(Message.new_method_return(message))
        try:
            self._active = window_target(*message.body[:4])
            self._place = window_place(self._active, *message.body[4:])
        except (TypeError, ValueError, KeyError) as exc:
            log.debug("unexpected report from the KWin script: %r (%s)", message.body, exc)
            self._active = self._place = None
        self._reported.set()
        return True

    @staticmethod
    def _write_script(service: str) -> Path:
        values = {
            "service": service,
            "path": REPORT_PATH,
            "interface": REPORT_INTERFACE,
            "member": REPORT_MEMBER,
        }
        text = SCRIPT % {key: js_string(value) for key, value in values.items()}
        with tempfile.NamedTemporaryFile(
            "w", prefix="anyfill-kwin-", suffix=".js", delete=False, encoding="utf-8"
        ) as out:
            out.write(text)
        return Path(out.name)


async def kwin_reachable(bus: MessageBus) -> bool:
    """KWin is on this session bus (for doctor: asks, loads nothing)."""
    question = Message(
        destination=BUS, path=BUS_PATH, interface=BUS, member="NameHasOwner", signature="s",
        body=[KWIN],
    )  # fmt: skip
    try:
        reply = await asyncio.wait_for(bus.call(question), TIMEOUT_S)
    except TimeoutError:
        return False
    return (
        reply is not None
        and reply.message_type == MessageType.METHOD_RETURN
        and bool(reply.body[0])
    )


def window_target(internal_id: str, resource_class: str, caption: str, pid: str) -> Target | None:
    """A report of the script as a Target; None when no window is active."""
    if not internal_id:
        return None
    window = uuid.UUID(internal_id.strip("{}"))
    number = int(pid) if str(pid).isdigit() else 0
    return Target(
        window_id=window.int & WINDOW_ID_MASK,
        app=resource_class,
        process=process_name(number),
        title=caption,
        pid=number or None,
    )


def window_place(target: Target | None, geometry: str = "") -> WindowPlace | None:
    """The script's geometry report (JSON) for ``target``; None without one."""
    if target is None or not geometry:
        return None
    data = json.loads(geometry)
    left, top, width, height = (round(float(v)) for v in data["screen"])
    return WindowPlace(
        target.window_id,
        round(float(data["x"])),
        round(float(data["y"])),
        ScreenArea(str(data.get("output") or ""), left, top, width, height),
    )


def _rect(area: ScreenArea) -> tuple[int, int, int, int]:
    return area.x, area.y, area.width, area.height


def js_string(value: str) -> str:
    """A JavaScript string literal (bus names and paths only; no quotes to escape)."""
    if any(char in value for char in '"\\\n'):
        raise ValueError(f"unexpected character in {value!r}")
    return f'"{value}"'

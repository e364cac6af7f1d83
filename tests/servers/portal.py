"""xdg-desktop-portal's GlobalShortcuts, RemoteDesktop and Clipboard interfaces, served on a
private session bus exactly as the portal documentation specifies them.

Each method checks its argument signature against the documented one and answers a
mismatch with ``org.freedesktop.DBus.Error.InvalidArgs``, as GDBus does. Requests answer
through ``org.freedesktop.portal.Request::Response`` on the path the caller predicted from
its ``handle_token``; sessions live at the path predicted from ``session_handle_token``.
The test plays the desktop and its user through the helper methods (press a shortcut,
close a session, copy in another app, paste in the target app).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus

NAME = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"
SHORTCUTS = "org.freedesktop.portal.GlobalShortcuts"
REMOTE = "org.freedesktop.portal.RemoteDesktop"
CLIPBOARD = "org.freedesktop.portal.Clipboard"
REQUEST = "org.freedesktop.portal.Request"
SESSION = "org.freedesktop.portal.Session"

# (interface, method) -> documented IN signature and OUT signature.
SIGNATURES: dict[tuple[str, str], tuple[str, str]] = {
    (SHORTCUTS, "CreateSession"): ("a{sv}", "o"),
    (SHORTCUTS, "BindShortcuts"): ("oa(sa{sv})sa{sv}", "o"),
    (SHORTCUTS, "ListShortcuts"): ("oa{sv}", "o"),
    (REMOTE, "CreateSession"): ("a{sv}", "o"),
    (REMOTE, "SelectDevices"): ("oa{sv}", "o"),
    (REMOTE, "Start"): ("osa{sv}", "o"),
    (REMOTE, "NotifyKeyboardKeysym"): ("oa{sv}iu", ""),
    (CLIPBOARD, "RequestClipboard"): ("oa{sv}", ""),
    (CLIPBOARD, "SetSelection"): ("oa{sv}", ""),
    (CLIPBOARD, "SelectionWrite"): ("ou", "h"),
    (CLIPBOARD, "SelectionWriteDone"): ("oub", ""),
    (CLIPBOARD, "SelectionRead"): ("os", "h"),
}
VERSIONS = {SHORTCUTS: 1, REMOTE: 2, CLIPBOARD: 1}


@dataclass
class Session:
    path: str
    kind: str
    owner: str
    shortcuts: dict[str, dict[str, Any]] = field(default_factory=dict)
    devices: int = 0
    restore_token: str = ""
    persist_mode: int = 0
    clipboard_requested: bool = False
    started: bool = False


@dataclass
class FakePortal:
    """The portal process: a bus name, its objects, and what callers did to them."""

    bus: MessageBus
    interfaces: set[str] = field(default_factory=lambda: set(VERSIONS))
    list_returns_nothing: bool = False
    """GNOME's quirk: ListShortcuts answers an empty list even for bound shortcuts."""
    sessions: dict[str, Session] = field(default_factory=dict)
    dialogs: int = 0
    """Consent dialogs shown: a Start without a valid restore token asks the user."""
    tokens: set[str] = field(default_factory=set)
    keys: list[tuple[int, int]] = field(default_factory=list)
    selection: dict[str, bytes] = field(default_factory=dict)
    """The clipboard while another application owns it."""
    owner: str = ""
    """The session path that owns the clipboard, or '' for another application."""
    offered: list[str] = field(default_factory=list)
    writes: dict[int, asyncio.Future[int]] = field(default_factory=dict)
    done: dict[int, bool] = field(default_factory=dict)
    _serial: int = 0

    def handle(self, message: Message) -> Message | bool | None:
        if message.message_type != MessageType.METHOD_CALL or message.path is None:
            return None
        if message.interface == "org.freedesktop.DBus.Properties":
            return self._property(message)
        key = (message.interface or "", message.member or "")
        if key not in SIGNATURES or key[0] not in self.interfaces:
            return Message.new_error(
                message, "org.freedesktop.DBus.Error.UnknownMethod", f"no method {key}"
            )
        wanted, out = SIGNATURES[key]
        if message.signature != wanted:
            return Message.new_error(
                message,
                "org.freedesktop.DBus.Error.InvalidArgs",
                f"{key[1]} takes ({wanted}), not ({message.signature})",
            )
        try:
            body = getattr(self, f"_{key[0].rsplit('.', 1)[1]}_{key[1]}")(message, *message.body)
        except (ValueError, KeyError) as exc:
            return Message.new_error(
                message, "org.freedesktop.portal.Error.InvalidArgument", str(exc)
            )
        if out == "h":
            # Our copy of the descriptor is closed once it is on its way: the reader only
            # sees the end of the data when every write end is closed.
            fd = body
            sent = self.bus.send(Message.new_method_return(message, "h", [0], unix_fds=[fd]))
            sent.add_done_callback(lambda _: os.close(fd))
            return True
        return Message.new_method_return(message, out, [body] if out else [])

    def _property(self, message: Message) -> Message:
        interface, name = message.body[0], message.body[1]
        if message.member != "Get" or name != "version" or interface not in self.interfaces:
            return Message.new_error(message, "org.freedesktop.DBus.Error.UnknownProperty", name)
        return Message.new_method_return(message, "v", [Variant("u", VERSIONS[interface])])

    # -- Request and Session objects ------------------------------------------------------

    def _request_path(self, message: Message, options: dict[str, Variant]) -> str:
        sender = (message.sender or "").lstrip(":").replace(".", "_")
        return f"{PATH}/request/{sender}/{options['handle_token'].value}"

    def _respond(self, path: str, code: int, results: dict[str, Variant]) -> None:
        def emit() -> None:
            self.bus.send(Message.new_signal(path, REQUEST, "Response", "ua{sv}", [code, results]))

        asyncio.get_running_loop().call_soon(emit)

    def _new_session(self, message: Message, options: dict[str, Variant], kind: str) -> str:
        sender = (message.sender or "").lstrip(":").replace(".", "_")
        path = f"{PATH}/session/{sender}/{options['session_handle_token'].value}"
        self.sessions[path] = Session(path, kind, message.sender or "")
        return path

    def _session(self, path: str, kind: str) -> Session:
        session = self.sessions.get(path)
        if session is None or session.kind != kind:
            raise ValueError(f"no {kind} session at {path}")
        return session

    def close_session(self, path: str) -> None:
        """The desktop closes a session (e.g. the portal restarted)."""
        self.sessions.pop(path, None)
        self.bus.send(Message.new_signal(path, SESSION, "Closed", "a{sv}", [{}]))

    # -- GlobalShortcuts ------------------------------------------------------------------

    def _GlobalShortcuts_CreateSession(self, message: Message, options: dict[str, Any]) -> str:
        request = self._request_path(message, options)
        session = self._new_session(message, options, "shortcuts")
        self._respond(request, 0, {"session_handle": Variant("s", session)})
        return request

    def _GlobalShortcuts_BindShortcuts(
        self, message: Message, handle: str, shortcuts: list[Any], parent: str, options: Any
    ) -> str:
        request = self._request_path(message, options)
        session = self._session(handle, "shortcuts")
        for shortcut_id, props in shortcuts:
            session.shortcuts[shortcut_id] = {k: v.value for k, v in props.items()}
        self._respond(request, 0, {"shortcuts": Variant("a(sa{sv})", self._described(session))})
        return request

    def _GlobalShortcuts_ListShortcuts(
        self, message: Message, handle: str, options: dict[str, Any]
    ) -> str:
        request = self._request_path(message, options)
        session = self._session(handle, "shortcuts")
        listed = [] if self.list_returns_nothing else self._described(session)
        self._respond(request, 0, {"shortcuts": Variant("a(sa{sv})", listed)})
        return request

    @staticmethod
    def _described(session: Session) -> list[Any]:
        return [
            [
                shortcut_id,
                {
                    "description": Variant("s", props.get("description", "")),
                    "trigger_description": Variant("s", props.get("preferred_trigger", "")),
                },
            ]
            for shortcut_id, props in session.shortcuts.items()
        ]

    def activate(self, shortcut_id: str) -> None:
        """The user presses a bound shortcut."""
        for session in self.sessions.values():
            if shortcut_id in session.shortcuts:
                self.bus.send(
                    Message.new_signal(
                        PATH,
                        SHORTCUTS,
                        "Activated",
                        "osta{sv}",
                        [session.path, shortcut_id, 1000, {}],
                    )
                )

    # -- RemoteDesktop --------------------------------------------------------------------

    def _RemoteDesktop_CreateSession(self, message: Message, options: dict[str, Any]) -> str:
        request = self._request_path(message, options)
        session = self._new_session(message, options, "remote")
        self._respond(request, 0, {"session_handle": Variant("s", session)})
        return request

    def _RemoteDesktop_SelectDevices(
        self, message: Message, handle: str, options: dict[str, Variant]
    ) -> str:
        request = self._request_path(message, options)
        session = self._session(handle, "remote")
        session.devices = int(options["types"].value) if "types" in options else 7
        session.persist_mode = (
            int(options["persist_mode"].value) if "persist_mode" in options else 0
        )
        if "restore_token" in options:
            session.restore_token = str(options["restore_token"].value)
        self._respond(request, 0, {})
        return request

    def _RemoteDesktop_Start(
        self, message: Message, handle: str, parent: str, options: dict[str, Variant]
    ) -> str:
        request = self._request_path(message, options)
        session = self._session(handle, "remote")
        if session.restore_token not in self.tokens:
            self.dialogs += 1  # the user is asked, and allows
        self.tokens.discard(session.restore_token)  # a token is good for one restore
        session.started = True
        results = {
            "devices": Variant("u", session.devices),
            "clipboard_enabled": Variant("b", session.clipboard_requested),
        }
        if session.persist_mode:
            token = f"token-{len(self.tokens) + self.dialogs}-{os.getpid()}"
            self.tokens.add(token)
            results["restore_token"] = Variant("s", token)
        self._respond(request, 0, results)
        return request

    def _RemoteDesktop_NotifyKeyboardKeysym(
        self, message: Message, handle: str, options: Any, keysym: int, state: int
    ) -> None:
        if not self._session(handle, "remote").started:
            raise ValueError("session not started")
        self.keys.append((keysym, state))

    # -- Clipboard ------------------------------------------------------------------------

    def _Clipboard_RequestClipboard(self, message: Message, handle: str, options: Any) -> None:
        session = self._session(handle, "remote")
        if session.started:
            raise ValueError("RequestClipboard must come before Start")
        session.clipboard_requested = True

    def _Clipboard_SetSelection(
        self, message: Message, handle: str, options: dict[str, Variant]
    ) -> None:
        self._session(handle, "remote")
        self.owner = handle
        self.offered = list(options["mime_types"].value)
        self._owner_changed(self.offered, True)

    def _owner_changed(self, mime_types: list[str], ours: bool) -> None:
        for session in self.sessions.values():
            if session.kind == "remote" and session.clipboard_requested:
                self.bus.send(
                    Message.new_signal(
                        PATH,
                        CLIPBOARD,
                        "SelectionOwnerChanged",
                        "oa{sv}",
                        [
                            session.path,
                            {
                                "mime_types": Variant("as", mime_types),
                                "session_is_owner": Variant(
                                    "b", ours and session.path == self.owner
                                ),
                            },
                        ],
                    )
                )

    def _Clipboard_SelectionWrite(self, message: Message, handle: str, serial: int) -> int:
        read_end, write_end = os.pipe()
        self.writes[serial].set_result(read_end)
        return write_end

    def _Clipboard_SelectionWriteDone(
        self, message: Message, handle: str, serial: int, success: bool
    ) -> None:
        self.done[serial] = success

    def _Clipboard_SelectionRead(self, message: Message, handle: str, mime: str) -> int:
        read_end, write_end = os.pipe()
        os.write(write_end, self.selection.get(mime, b""))
        os.close(write_end)
        return read_end

    def copy_elsewhere(self, formats: dict[str, bytes]) -> None:
        """Another application copies: the clipboard is theirs."""
        self.owner = ""
        self.selection = dict(formats)
        self._owner_changed(list(formats), False)

    async def paste(self, mime: str) -> bytes:
        """The focused application pastes: the owning session is asked for ``mime``."""
        self._serial += 1
        serial = self._serial
        self.writes[serial] = asyncio.get_running_loop().create_future()
        self.bus.send(
            Message.new_signal(
                PATH, CLIPBOARD, "SelectionTransfer", "osu", [self.owner, mime, serial]
            )
        )
        read_end = await asyncio.wait_for(self.writes[serial], 5)
        data = await asyncio.to_thread(_read_all, read_end)
        for _ in range(100):
            if serial in self.done:
                break
            await asyncio.sleep(0.01)
        return data


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as reader:
        return reader.read()


PRIVATE_BUS_CONFIG = """<busconfig>
  <type>session</type>
  <listen>unix:tmpdir={workdir}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


@contextlib.asynccontextmanager
async def private_bus() -> AsyncIterator[str]:
    """A dbus-daemon of our own; its address. It activates nothing: with the desktop's
    services reachable, a call to a portal name would start the real xdg-desktop-portal (and
    its KDE backend, which outlives the bus) instead of finding the stand-in missing."""
    workdir = Path(tempfile.mkdtemp(prefix="anyfill-bus-"))
    config = workdir / "bus.conf"
    config.write_text(PRIVATE_BUS_CONFIG.format(workdir=workdir), encoding="utf-8")
    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(  # noqa: ASYNC220 - a daemon started once, not awaited
        ["dbus-daemon", f"--config-file={config}", "--nofork", f"--print-address={write_fd}"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=workdir,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        address = (await asyncio.to_thread(reader.readline)).decode().strip()
    try:
        yield address
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 5)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.asynccontextmanager
async def serve_portal(address: str, **options: Any) -> AsyncIterator[FakePortal]:
    bus = await MessageBus(bus_address=address, negotiate_unix_fd=True).connect()
    portal = FakePortal(bus, **options)
    bus.add_message_handler(portal.handle)
    await bus.request_name(NAME)
    try:
        yield portal
    finally:
        bus.disconnect()

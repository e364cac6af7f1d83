"""Keys and the clipboard through the RemoteDesktop and Clipboard portals (GNOME, KDE).

The desktop asks the user once for consent; the ``restore_token`` it returns is kept in the
state directory, so later sessions start without asking again (``persist_mode`` 2: until
the user revokes it). The session is started on first use, not at daemon start: a user whose
applications all take AT-SPI insertion never sees the dialog.

The Clipboard portal serves every format we offer and tells us each time the application
fetches one (``SelectionTransfer``), like X11 selections do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from dbus_fast import Variant

from anyfill.daemon.desktop.ports import ClipSnapshot, Offer, Value, Which, saved_or_refused
from anyfill.daemon.errors import InsertError
from anyfill.daemon.wayland.keysyms import MODIFIERS, keysym, parse_chord
from anyfill.daemon.wayland.portal.bus import SESSION, PortalBus, PortalError

log = logging.getLogger("anyfill.wayland.remote")

REMOTE = "org.freedesktop.portal.RemoteDesktop"
CLIPBOARD = "org.freedesktop.portal.Clipboard"
KEYBOARD = 1
PERSIST_UNTIL_REVOKED = 2
PRESSED, RELEASED = 1, 0
READ_TIMEOUT_S = 1.0


def default_token_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_state_dir("anyfill", appauthor=False)) / "portal-restore-token"


class RemoteSession:
    """One RemoteDesktop session with keyboard access and, where offered, the clipboard."""

    def __init__(self, portal: PortalBus, token_path: Path | None = None) -> None:
        self._portal = portal
        self._token_path = token_path or default_token_path()
        self._lock = asyncio.Lock()
        self.handle = ""
        self.clipboard = False
        self._closed = asyncio.Event()

    @staticmethod
    async def available(portal: PortalBus) -> bool:
        return await portal.version(REMOTE) >= 1

    async def ensure_started(self) -> str:
        async with self._lock:
            if self.handle and not self._closed.is_set():
                return self.handle
            await self._start()
            return self.handle

    async def _start(self) -> None:
        portal = self._portal
        results = await portal.request(
            REMOTE,
            "CreateSession",
            "",
            [],
            {"session_handle_token": Variant("s", portal.token())},
        )
        handle = str(results["session_handle"])
        self._closed = asyncio.Event()
        closed = self._closed

        def on_closed(args: list[Any]) -> None:
            closed.set()

        await portal.subscribe(SESSION, "Closed", on_closed, path=handle)
        options = {
            "types": Variant("u", KEYBOARD),
            "persist_mode": Variant("u", PERSIST_UNTIL_REVOKED),
        }
        saved = self._read_token()
        if saved:
            options["restore_token"] = Variant("s", saved)
        await portal.request(REMOTE, "SelectDevices", "o", [handle], options)
        wants_clipboard = await portal.version(CLIPBOARD) >= 1
        if wants_clipboard:
            await portal.call(CLIPBOARD, "RequestClipboard", "oa{sv}", [handle, {}])
        started = await portal.request(REMOTE, "Start", "os", [handle, ""], {})
        devices = int(started.get("devices", 0))
        if not devices & KEYBOARD:
            raise PortalError("the desktop did not grant keyboard access to anyfill")
        token = started.get("restore_token")
        if token:
            self._write_token(str(token))
        self.clipboard = wants_clipboard and bool(started.get("clipboard_enabled", False))
        self.handle = handle
        log.info(
            "remote desktop session started (keyboard%s)", ", clipboard" if self.clipboard else ""
        )

    def _read_token(self) -> str:
        try:
            return self._token_path.read_text(encoding="utf-8").strip()
        except OSError:
            return ""

    def _write_token(self, token: str) -> None:
        self._token_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(token)

    async def close(self) -> None:
        if self.handle and not self._closed.is_set():
            with contextlib.suppress(PortalError):
                await self._portal.call(SESSION, "Close", path=self.handle)
        self.handle = ""


class PortalKeys:
    """The :class:`~anyfill.daemon.desktop.ports.Keys` port through ``NotifyKeyboardKeysym``."""

    def __init__(self, session: RemoteSession, portal: PortalBus) -> None:
        self._session = session
        self._portal = portal
        self._injecting = 0

    @property
    def injecting(self) -> bool:
        return self._injecting > 0

    async def press(self, chord: str) -> None:
        mods, key = parse_chord(chord)
        syms = [MODIFIERS[mod][1] for mod in mods]
        await self._send(
            [
                *[(s, PRESSED) for s in syms],
                (keysym(key), PRESSED),
                (keysym(key), RELEASED),
                *[(s, RELEASED) for s in reversed(syms)],
            ]
        )

    async def type_text(self, text: str) -> bool:
        if not text.isascii() or "\n" in text:
            return False  # keysyms outside the keymap do not reach every compositor
        events: list[tuple[int, int]] = []
        for char in text:
            sym = keysym(char)
            events += [(sym, PRESSED), (sym, RELEASED)]
        await self._send(events)
        return True

    async def wait_released(self, timeout_s: float) -> bool:
        return True  # the portal does not tell the user's key state

    async def _send(self, events: list[tuple[int, int]]) -> None:
        self._injecting += 1
        try:
            handle = await self._session.ensure_started()
            for sym, state in events:
                await self._portal.call(
                    REMOTE, "NotifyKeyboardKeysym", "oa{sv}iu", [handle, {}, sym, state]
                )
        except PortalError as exc:
            raise InsertError(f"the RemoteDesktop portal could not send keys: {exc}") from exc
        finally:
            self._injecting -= 1


class PortalClipboard:
    """The :class:`~anyfill.daemon.desktop.ports.Clipboard` port through the Clipboard portal."""

    def __init__(self, session: RemoteSession, portal: PortalBus) -> None:
        self._session = session
        self._portal = portal
        self._types: list[str] = []
        self._offer: Offer | None = None

    async def __aenter__(self) -> PortalClipboard:
        await self._portal.subscribe(CLIPBOARD, "SelectionOwnerChanged", self._on_owner)
        await self._portal.subscribe(CLIPBOARD, "SelectionTransfer", self._on_transfer)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._portal.unsubscribe(CLIPBOARD, "SelectionOwnerChanged", self._on_owner)
        await self._portal.unsubscribe(CLIPBOARD, "SelectionTransfer", self._on_transfer)

    async def _handle(self) -> str:
        handle = await self._session.ensure_started()
        if not self._session.clipboard:
            raise InsertError("the desktop did not grant clipboard access to anyfill")
        return handle

    def _on_owner(self, args: list[Any]) -> None:
        if str(args[0]) != self._session.handle:
            return
        options = {key: value.value for key, value in args[1].items()}
        self._types = [str(t) for t in options.get("mime_types", [])]
        if not options.get("session_is_owner", False) and self._offer is not None:
            self._offer.lost.set()
            self._offer = None

    def _on_transfer(self, args: list[Any]) -> None:
        if str(args[0]) != self._session.handle:
            return
        asyncio.get_running_loop().create_task(self._serve(str(args[1]), int(args[2])))

    async def _serve(self, mime: str, serial: int) -> None:
        offer, ok = self._offer, False
        try:
            item = offer.snapshot.items.get(mime) if offer is not None else None
            reply = await self._portal.call(
                CLIPBOARD, "SelectionWrite", "ou", [self._session.handle, serial]
            )
            fd = reply.unix_fds[reply.body[0]]
            data = item[2] if item is not None and isinstance(item[2], bytes) else b""
            await asyncio.to_thread(_write_all, fd, data)
            ok = item is not None
        except (PortalError, OSError, IndexError) as exc:
            log.debug("serving %s failed: %s", mime, exc)
        with contextlib.suppress(PortalError):
            await self._portal.call(
                CLIPBOARD, "SelectionWriteDone", "oub", [self._session.handle, serial, ok]
            )
        if ok and offer is not None:
            offer.note_fetch()

    async def snapshot(self, which: Which) -> ClipSnapshot:
        if which != "clipboard":
            return ClipSnapshot()  # the portal has no primary selection
        await self._handle()
        items: dict[str, tuple[str, int, Value]] = {}
        for mime in list(self._types):
            data = await self._read(mime)
            if data is not None:
                items[mime] = (mime, 8, data)
        return saved_or_refused(which, len(self._types), ClipSnapshot(items))

    async def _read(self, mime: str) -> bytes | None:
        try:
            reply = await self._portal.call(
                CLIPBOARD, "SelectionRead", "os", [self._session.handle, mime]
            )
            fd = reply.unix_fds[reply.body[0]]
            return await asyncio.wait_for(asyncio.to_thread(_read_all, fd), READ_TIMEOUT_S)
        except (PortalError, OSError, IndexError, TimeoutError) as exc:
            log.debug("reading %s failed: %s", mime, exc)
            return None

    async def offer(self, which: Which, snapshot: ClipSnapshot, reader: int | None = None) -> Offer:
        offer = Offer(snapshot)
        if which != "clipboard":
            return offer
        handle = await self._handle()
        self._offer = offer
        await self._portal.call(
            CLIPBOARD,
            "SetSelection",
            "oa{sv}",
            [handle, {"mime_types": Variant("as", list(snapshot.items))}],
        )
        return offer

    async def restore(
        self,
        which: Which,
        snapshot: ClipSnapshot,
        reader: int | None = None,
        as_of: Offer | None = None,
    ) -> Offer | None:
        # ``as_of`` is ignored: see WlClipboard.restore (no times, no visible owner).
        if which != "clipboard":
            return None
        return await self.offer(which, snapshot)

    async def read_text(self, which: Which, timeout_s: float) -> str | None:
        if which != "clipboard":
            return None
        await self._handle()
        for mime in ("text/plain;charset=utf-8", "UTF8_STRING", "text/plain"):
            if mime in self._types:
                data = await self._read(mime)
                if data is not None:
                    return data.decode("utf-8", "replace")
        return None

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        return False

    def holder(self, which: Which) -> Literal["us", "nobody", "other"]:
        return "other"  # the portal does not say who owns the selection


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)

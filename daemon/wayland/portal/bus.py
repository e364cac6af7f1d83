"""One session-bus connection to xdg-desktop-portal: calls, Request/Response, signals.

Portal methods that may show a dialog answer through a Request object: the client names
it in advance (``handle_token``), subscribes to its ``Response`` signal, then calls.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable
from typing import Any

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from anyfill.daemon.errors import DesktopUnavailable

log = logging.getLogger("anyfill.wayland.portal")

NAME = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"
REQUEST = "org.freedesktop.portal.Request"
SESSION = "org.freedesktop.portal.Session"
CALL_TIMEOUT_S = 5.0
DIALOG_TIMEOUT_S = 300.0
"""A Request may wait for the user to answer a consent dialog."""

SignalHandler = Callable[[list[Any]], None]


class PortalError(DesktopUnavailable):
    """A portal is missing, refused, or the user cancelled its dialog."""


class PortalBus:
    def __init__(self, address: str | None = None) -> None:
        self._address = address
        self._bus: MessageBus | None = None
        self._handlers: dict[tuple[str, str, str | None], list[SignalHandler]] = {}
        self._tokens = itertools.count(1)
        self._prefix = f"anyfill{os.getpid()}"

    @property
    def bus(self) -> MessageBus:
        if self._bus is None:
            raise PortalError("not connected to the session bus")
        return self._bus

    async def connect(self) -> PortalBus:
        try:
            bus = MessageBus(
                bus_address=self._address, bus_type=BusType.SESSION, negotiate_unix_fd=True
            )
            self._bus = await asyncio.wait_for(bus.connect(), CALL_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise PortalError(f"cannot reach the session bus: {exc}") from exc
        self._bus.add_message_handler(self._dispatch)
        return self

    def close(self) -> None:
        if self._bus is not None:
            self._bus.disconnect()
            self._bus = None

    def token(self) -> str:
        return f"{self._prefix}_{next(self._tokens)}"

    async def call(
        self,
        interface: str,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
        *,
        path: str = PATH,
    ) -> Message:
        message = Message(
            destination=NAME,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=body or [],
        )
        try:
            reply = await asyncio.wait_for(self.bus.call(message), CALL_TIMEOUT_S)
        except TimeoutError as exc:
            raise PortalError(f"{interface}.{member} did not answer") from exc
        if reply is None or reply.message_type == MessageType.ERROR:
            detail = reply.body[0] if reply is not None and reply.body else ""
            name = reply.error_name if reply is not None else "no reply"
            raise PortalError(f"{interface}.{member} failed: {name} {detail}".strip())
        return reply

    async def version(self, interface: str) -> int:
        """The interface's ``version`` property; 0 when the portal lacks the interface."""
        message = Message(
            destination=NAME,
            path=PATH,
            interface="org.freedesktop.DBus.Properties",
            member="Get",
            signature="ss",
            body=[interface, "version"],
        )
        try:
            reply = await asyncio.wait_for(self.bus.call(message), CALL_TIMEOUT_S)
        except TimeoutError:
            return 0
        if reply is None or reply.message_type == MessageType.ERROR:
            return 0
        value = reply.body[0]
        return int(value.value if isinstance(value, Variant) else value)

    async def request(
        self,
        interface: str,
        member: str,
        signature: str,
        body: list[Any],
        options: dict[str, Variant],
        *,
        timeout_s: float = DIALOG_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Call a method whose last argument is its options (``signature`` names the ones
        before it) and whose answer comes as a Request ``Response``; the results, or
        PortalError when refused or cancelled."""
        token = self.token()
        sender = (self.bus.unique_name or "").lstrip(":").replace(".", "_")
        handle = f"{PATH}/request/{sender}/{token}"
        answer: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()

        def on_response(args: list[Any]) -> None:
            if not answer.done():
                answer.set_result(args)

        await self.subscribe(REQUEST, "Response", on_response, path=handle)
        try:
            options = {**options, "handle_token": Variant("s", token)}
            await self.call(interface, member, signature + "a{sv}", [*body, options])
            code, results = await asyncio.wait_for(answer, timeout_s)
        except TimeoutError as exc:
            raise PortalError(f"{interface}.{member}: no answer from the portal") from exc
        finally:
            await self.unsubscribe(REQUEST, "Response", on_response, path=handle)
        if code != 0:
            why = "the user cancelled" if code == 1 else "the portal refused"
            raise PortalError(f"{interface}.{member}: {why}")
        return {key: unwrap(value) for key, value in results.items()}

    async def subscribe(
        self, interface: str, member: str, handler: SignalHandler, *, path: str | None = None
    ) -> None:
        key = (interface, member, path)
        if key not in self._handlers:
            rule = f"type='signal',interface='{interface}',member='{member}'"
            if path is not None:
                rule += f",path='{path}'"
            await self._add_match(rule)
        self._handlers.setdefault(key, []).append(handler)

    async def unsubscribe(
        self, interface: str, member: str, handler: SignalHandler, *, path: str | None = None
    ) -> None:
        handlers = self._handlers.get((interface, member, path), [])
        if handler in handlers:
            handlers.remove(handler)

    async def _add_match(self, rule: str) -> None:
        await self.bus.call(
            Message(
                destination="org.freedesktop.DBus",
                path="/org/freedesktop/DBus",
                interface="org.freedesktop.DBus",
                member="AddMatch",
                signature="s",
                body=[rule],
            )
        )

    def _dispatch(self, message: Message) -> None:
        if message.message_type != MessageType.SIGNAL:
            return
        interface, member = message.interface or "", message.member or ""
        for path in (message.path, None):
            for handler in list(self._handlers.get((interface, member, path), ())):
                try:
                    handler(list(message.body))
                except Exception:
                    log.exception("a portal signal handler failed")


def unwrap(value: Any) -> Any:
    """Variants to plain Python values, recursively."""
    if isinstance(value, Variant):
        return unwrap(value.value)
    if isinstance(value, dict):
        return {key: unwrap(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [unwrap(item) for item in value]
    return value

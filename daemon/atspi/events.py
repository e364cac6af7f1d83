"""The user typing in an application, from AT-SPI's text events (any display protocol).

A Wayland client sees no other client's keys. AT-SPI does: applications emit
``TextChanged`` and ``TextCaretMoved`` on the accessibility bus once a listener registered
for them with the registry. We register only while a preview shows (it makes every
application send these events) and take them on the daemon's loop through dbus-fast.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus

log = logging.getLogger("anyfill.atspi.events")

EVENTS = ("object:text-changed", "object:text-caret-moved")
_MEMBERS = ("TextChanged", "TextCaretMoved")
_OBJECT_EVENTS = "org.a11y.atspi.Event.Object"
_REGISTRY = ("org.a11y.atspi.Registry", "/org/a11y/atspi/registry", "org.a11y.atspi.Registry")
TIMEOUT_S = 2.0


class AtspiTextEvents:
    """``async with AtspiTextEvents(on_change):`` reports text changes and caret moves in
    every application but ours, as ``on_change(pid)``."""

    def __init__(self, on_change: Callable[[int], None], address: str | None = None) -> None:
        self._on_change = on_change
        self._address = address
        self._bus: MessageBus | None = None
        self._pids: dict[str, int] = {}
        self._registered: list[str] = []

    async def __aenter__(self) -> AtspiTextEvents:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                address = self._address or await _a11y_address()
                self._bus = await MessageBus(bus_address=address).connect()
                self._bus.add_message_handler(self._on_message)
                for member in _MEMBERS:
                    rule = f"type='signal',interface='{_OBJECT_EVENTS}',member='{member}'"
                    await self._call(
                        "org.freedesktop.DBus",
                        "/org/freedesktop/DBus",
                        "org.freedesktop.DBus",
                        "AddMatch",
                        "s",
                        [rule],
                    )
                for event in EVENTS:
                    await self._call(*_REGISTRY, "RegisterEvent", "sass", [event, [], ""])
                    self._registered.append(event)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        bus, self._bus = self._bus, None
        if bus is None:
            return
        try:
            async with asyncio.timeout(TIMEOUT_S):
                for event in self._registered:
                    await _call(bus, *_REGISTRY, "DeregisterEvent", "s", [event])
        except (OSError, TimeoutError, RuntimeError) as exc:
            log.debug("could not deregister the AT-SPI text events: %s", exc)
        finally:
            self._registered.clear()
            bus.disconnect()

    async def _call(self, *args: Any) -> Any:
        assert self._bus is not None
        return await _call(self._bus, *args)

    def _on_message(self, message: Message) -> None:
        if message.message_type != MessageType.SIGNAL or message.member not in _MEMBERS:
            return
        if message.interface != _OBJECT_EVENTS or not message.sender:
            return
        sender = message.sender
        pid = self._pids.get(sender)
        if pid is not None:
            self._report(pid)
            return
        asyncio.get_running_loop().create_task(self._resolve(sender))

    async def _resolve(self, sender: str) -> None:
        try:
            reply = await self._call(
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetConnectionUnixProcessID",
                "s",
                [sender],
            )
            pid = int(reply[0])
        except (OSError, RuntimeError, AssertionError, ValueError) as exc:
            log.debug("no pid for %s: %s", sender, exc)
            pid = 0
        self._pids[sender] = pid
        self._report(pid)

    def _report(self, pid: int) -> None:
        if pid != os.getpid():  # the preview popup itself is accessible too
            self._on_change(pid)


async def _call(  # noqa: PLR0917 - the fields of one D-Bus method call, in its order
    bus: MessageBus, dest: str, path: str, iface: str, member: str, sig: str, body: list[Any]
) -> Any:
    reply = await bus.call(
        Message(
            destination=dest,
            path=path,
            interface=iface,
            member=member,
            signature=sig,
            body=body,
        )
    )
    if reply is None or reply.message_type == MessageType.ERROR:
        error = reply.body[0] if reply is not None and reply.body else "no answer"
        raise RuntimeError(f"{member}: {error}")
    return reply.body


async def _a11y_address() -> str:
    """The accessibility bus: ``AT_SPI_BUS_ADDRESS``, else ``org.a11y.Bus`` on the session bus."""
    address = os.environ.get("AT_SPI_BUS_ADDRESS", "")
    if address:
        return address
    session = await MessageBus(bus_type=BusType.SESSION).connect()
    try:
        reply = await _call(
            session, "org.a11y.Bus", "/org/a11y/bus", "org.a11y.Bus", "GetAddress", "", []
        )
        return str(reply[0])
    finally:
        session.disconnect()

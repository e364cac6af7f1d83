"""The focused application's text events and its text field, over AT-SPI's D-Bus protocol.

Kept apart from the capture's libatspi on purpose: this speaks the accessibility bus with
dbus-fast on the daemon's asyncio loop (no thread, no GLib, no libatspi), so an
application quitting mid-read is a D-Bus error on one call, never a crash in a C library.

Registering for ``object:text-changed`` / ``object:text-caret-moved`` with the registry
makes applications send them; some Qt applications then switch into their screen-reader
mode. So the listener is only open while ``suggestions.auto`` is on (and not paused).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from anyfill.daemon.context import CaretRect
from anyfill.daemon.desktop.suggest.rules import Field

log = logging.getLogger("anyfill.suggest.atspi")

EVENTS = ("object:text-changed", "object:text-caret-moved")
_MEMBERS = ("TextChanged", "TextCaretMoved")
_OBJECT_EVENTS = "org.a11y.atspi.Event.Object"
_REGISTRY = ("org.a11y.atspi.Registry", "/org/a11y/atspi/registry", "org.a11y.atspi.Registry")
_DBUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
_TEXT = "org.a11y.atspi.Text"
_ACCESSIBLE = "org.a11y.atspi.Accessible"
_APPLICATION = "org.a11y.atspi.Application"
QT_LINE = 1.25
"""A Qt character rectangle's height times this: the whole line, descent included."""
TIMEOUT_S = 2.0
READ_TIMEOUT_S = 0.3
MAX_BEFORE = 4000
MAX_AFTER = 1000
# AT-SPI's StateType and Role numbers (atspi-constants.h)
STATE_EDITABLE = 7
STATE_FOCUSED = 12
STATE_SINGLE_LINE = 26
ROLE_PASSWORD_TEXT = 40
COORDS_SCREEN = 0

Kind = Literal["insert", "delete", "caret"]


@dataclass(frozen=True)
class TextEvent:
    """One event of a text field: where (``sender``, ``path``), which process, what."""

    kind: Kind
    sender: str
    path: str
    pid: int
    offset: int
    text: str = ""


@dataclass(frozen=True)
class FieldRead:
    """The field as read at one moment: its text around the caret and where it is drawn."""

    field: Field
    caret_offset: int
    caret: CaretRect | None
    font_family: str = ""
    font_size: float = 0.0
    """Points, as the application reports it (0: it did not say)."""


class AtspiTextSource:
    """``async with AtspiTextSource(on_event):`` reports text events of every process but
    ours; :meth:`read` reads one field."""

    def __init__(self, on_event: Callable[[TextEvent], None], address: str | None = None) -> None:
        self._on_event = on_event
        self._address = address
        self._bus: MessageBus | None = None
        self._pids: dict[str, int] = {}
        self._toolkits: dict[str, str] = {}
        self._registered: list[str] = []

    async def __aenter__(self) -> AtspiTextSource:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                address = self._address or await a11y_address()
                self._bus = await MessageBus(bus_address=address).connect()
                self._bus.add_message_handler(self._on_message)
                for member in _MEMBERS:
                    rule = f"type='signal',interface='{_OBJECT_EVENTS}',member='{member}'"
                    await self._call(*_DBUS, "AddMatch", "s", [rule])
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

    # -- events ---------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        if message.message_type != MessageType.SIGNAL or message.member not in _MEMBERS:
            return
        if message.interface != _OBJECT_EVENTS or not message.sender:
            return
        event = _event_of(message, self._pids.get(message.sender))
        if event is None:
            return
        if event.pid:
            self._report(event)
            return
        asyncio.get_running_loop().create_task(self._resolve(message.sender, event))

    async def _resolve(self, sender: str, event: TextEvent) -> None:
        try:
            reply = await self._call(*_DBUS, "GetConnectionUnixProcessID", "s", [sender])
            pid = int(reply[0])
        except (OSError, RuntimeError, AssertionError, ValueError) as exc:
            log.debug("no pid for %s: %s", sender, exc)
            pid = -1
        self._pids[sender] = pid
        self._report(TextEvent(event.kind, sender, event.path, pid, event.offset, event.text))

    def _report(self, event: TextEvent) -> None:
        if event.pid not in (os.getpid(), -1):  # the popup itself is accessible too
            self._on_event(event)

    # -- reading a field ------------------------------------------------------------

    async def read(self, sender: str, path: str) -> FieldRead | None:
        """The field now; None when it is gone, not focused, or does not answer in time."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                return await self._read(sender, path)
        except (OSError, TimeoutError, RuntimeError, AssertionError, ValueError) as exc:
            log.debug("reading the field %s%s failed: %s", sender, path, exc or "timeout")
            return None

    async def _read(self, sender: str, path: str) -> FieldRead | None:
        states = await self._call(sender, path, _ACCESSIBLE, "GetState", "", [])
        bits = _bits(states[0])
        if STATE_FOCUSED not in bits:
            return None
        role = int((await self._call(sender, path, _ACCESSIBLE, "GetRole", "", []))[0])
        caret = int(await self._property(sender, path, _TEXT, "CaretOffset"))
        count = int(await self._property(sender, path, _TEXT, "CharacterCount"))
        if caret < 0:
            return None
        start, end = max(0, caret - MAX_BEFORE), min(count, caret + MAX_AFTER)
        before = str((await self._call(sender, path, _TEXT, "GetText", "ii", [start, caret]))[0])
        after = str((await self._call(sender, path, _TEXT, "GetText", "ii", [caret, end]))[0])
        selections = int((await self._call(sender, path, _TEXT, "GetNSelections", "", []))[0])
        rect = await self._caret_rect(sender, path, caret, count)
        if rect is not None and await self._is_qt(sender):
            if start == 0 and "\n" in before:
                rect = await self._below_first_line(sender, path, rect, before.count("\n"))
            # Qt's character rectangle stops at the baseline; the line goes on below it
            # by the font's descent (about a quarter of that height), as GTK's includes.
            rect = CaretRect(rect.x, rect.y, rect.width, round(rect.height * QT_LINE))
        attrs = await self._attributes(sender, path, max(caret - 1, 0))
        # Qt quotes the family ('"Sans Serif"'), as CSS would
        family = (attrs.get("family-name") or attrs.get("font-family") or "").strip("\"' ")
        return FieldRead(
            Field(
                before,
                after,
                editable=STATE_EDITABLE in bits,
                selection=selections > 0,
                password=role == ROLE_PASSWORD_TEXT,
                single_line=STATE_SINGLE_LINE in bits,
            ),
            caret,
            rect,
            family,
            _points(attrs.get("size") or attrs.get("font-size") or ""),
        )

    async def _caret_rect(self, sender: str, path: str, caret: int, count: int) -> CaretRect | None:
        x, y, width, height = await self._extents(sender, path, caret)
        if height <= 0 and caret > 0 and caret >= count:
            # After the last character most toolkits report nothing: the right edge of
            # the character before it is where the caret is drawn (unless that was a line
            # break, then the caret is on a line with no extents: unknown).
            before = str(
                (await self._call(sender, path, _TEXT, "GetText", "ii", [caret - 1, caret]))[0]
            )
            if before != "\n":
                x, y, width, height = await self._extents(sender, path, caret - 1)
                x, width = x + width, 1
        if height <= 0 or (x, y) == (0, 0) or x < -10_000 or y < -10_000:
            return None
        return CaretRect(x, y, max(width, 1), height)

    async def _is_qt(self, sender: str) -> bool:
        known = self._toolkits.get(sender)
        if known is None:
            try:
                name = await self._property(
                    sender, "/org/a11y/atspi/accessible/root", _APPLICATION, "ToolkitName"
                )
                known = str(name)
            except RuntimeError:
                known = ""
            self._toolkits[sender] = known
        return known.lower().startswith("qt")

    async def _below_first_line(
        self, sender: str, path: str, rect: CaretRect, lines: int
    ) -> CaretRect:
        """Qt's plain-text editors report every character at the height of the first line
        (each paragraph laid out on its own; frescobaldi#1383): a caret on a later line
        at the first character's height is moved down by its number of lines (in a view
        scrolled down this is wrong: there is nothing better to go by)."""
        _x, first_y, _w, height = await self._extents(sender, path, 0)
        if height > 0 and first_y == rect.y:
            return CaretRect(rect.x, rect.y + lines * rect.height, rect.width, rect.height)
        return rect

    async def _extents(self, sender: str, path: str, offset: int) -> tuple[int, int, int, int]:
        reply = await self._call(
            sender, path, _TEXT, "GetCharacterExtents", "iu", [offset, COORDS_SCREEN]
        )
        x, y, width, height = (int(v) for v in reply[:4])
        return x, y, width, height

    async def _attributes(self, sender: str, path: str, offset: int) -> dict[str, str]:
        try:
            reply = await self._call(sender, path, _TEXT, "GetAttributeRun", "ib", [offset, True])
            attrs = {str(k): str(v) for k, v in dict(reply[0]).items()}
            if attrs:
                return attrs
            reply = await self._call(sender, path, _TEXT, "GetDefaultAttributes", "", [])
            return {str(k): str(v) for k, v in dict(reply[0]).items()}
        except RuntimeError:
            return {}

    async def _property(self, sender: str, path: str, iface: str, name: str) -> Any:
        reply = await self._call(
            sender, path, "org.freedesktop.DBus.Properties", "Get", "ss", [iface, name]
        )
        value = reply[0]
        return value.value if isinstance(value, Variant) else value

    async def _call(self, *args: Any) -> Any:
        if self._bus is None:
            raise RuntimeError("the accessibility bus is closed")
        return await _call(self._bus, *args)


def _event_of(message: Message, pid: int | None) -> TextEvent | None:
    body = message.body
    path = message.path or ""
    sender = message.sender or ""
    if len(body) < 3:
        return None
    detail, offset, length = str(body[0]), int(body[1]), int(body[2])
    if message.member == "TextCaretMoved":
        return TextEvent("caret", sender, path, pid or 0, offset)
    data = body[3].value if len(body) > 3 and isinstance(body[3], Variant) else ""
    text = data if isinstance(data, str) else ""
    if detail.startswith("insert"):
        return TextEvent(
            "insert",
            sender,
            path,
            pid or 0,
            offset,
            text[:length] if length else text,
        )
    if detail.startswith("delete"):
        return TextEvent("delete", sender, path, pid or 0, offset)
    return None


def _bits(words: list[int]) -> set[int]:
    return {n + 32 * i for i, word in enumerate(words) for n in range(32) if int(word) >> n & 1}


def _points(size: str) -> float:
    """'12', '10pt' or '13.5' as points; a size in pixels ('16px') at 96 dpi."""
    text = size.strip().lower()
    try:
        if text.endswith("px"):
            return float(text[:-2]) * 0.75
        return float(text.removesuffix("pt"))
    except ValueError:
        return 0.0


async def _call(  # noqa: PLR0917 - the fields of one D-Bus method call, in its order
    bus: MessageBus, dest: str, path: str, iface: str, member: str, sig: str, body: list[Any]
) -> Any:
    reply = await bus.call(
        Message(
            destination=dest, path=path, interface=iface, member=member, signature=sig, body=body
        )
    )
    if reply is None or reply.message_type == MessageType.ERROR:
        error = reply.body[0] if reply is not None and reply.body else "no answer"
        raise RuntimeError(f"{member}: {error}")
    return reply.body


async def a11y_address() -> str:
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

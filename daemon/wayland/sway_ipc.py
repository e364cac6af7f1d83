"""sway's IPC (the i3 protocol) on the daemon's loop: commands, queries, event streams.

A message is ``i3-ipc``, the payload's length and its type (little-endian 32-bit), then
JSON. Events come on a connection that subscribed, with the type's high bit set.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAGIC = b"i3-ipc"
RUN_COMMAND = 0
SUBSCRIBE = 2
GET_OUTPUTS = 3
GET_TREE = 4
GET_CONFIG = 9
EVENT_BIT = 0x80000000
EVENTS = {"window": 3, "binding": 5, "shutdown": 6}
TIMEOUT_S = 2.0


class SwayIpcError(OSError):
    """sway did not answer, or refused a command."""


async def _send(writer: asyncio.StreamWriter, kind: int, payload: bytes) -> None:
    writer.write(MAGIC + struct.pack("<II", len(payload), kind) + payload)
    await writer.drain()


async def _receive(reader: asyncio.StreamReader) -> tuple[int, Any]:
    header = await reader.readexactly(len(MAGIC) + 8)
    if header[: len(MAGIC)] != MAGIC:
        raise SwayIpcError("not an i3/sway IPC message")
    length, kind = struct.unpack("<II", header[len(MAGIC) :])
    return kind, json.loads(await reader.readexactly(length))


class SwayIpc:
    """One request per connection: sway answers in order, and a short-lived connection
    cannot interleave with another task's request."""

    def __init__(self, socket_path: str) -> None:
        self.path = socket_path

    async def request(self, kind: int, payload: str = "") -> Any:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(self.path)
                try:
                    await _send(writer, kind, payload.encode())
                    _, reply = await _receive(reader)
                    return reply
                finally:
                    writer.close()
        except (OSError, EOFError, ValueError, TimeoutError) as exc:
            if isinstance(exc, SwayIpcError):
                raise
            raise SwayIpcError(f"sway IPC failed: {exc or type(exc).__name__}") from exc

    async def command(self, text: str) -> list[Mapping[str, Any]]:
        """Run sway commands (``;``-separated); one result per command."""
        return list(await self.request(RUN_COMMAND, text))

    async def tree(self) -> Mapping[str, Any]:
        return dict(await self.request(GET_TREE))

    async def outputs(self) -> list[Mapping[str, Any]]:
        return list(await self.request(GET_OUTPUTS))

    async def config(self) -> str:
        return str((await self.request(GET_CONFIG)).get("config", ""))


class SwayEvents:
    """A subscription: ``on_event(name, payload)`` is called on the loop for each event
    until :meth:`close`."""

    def __init__(
        self, socket_path: str, on_event: Callable[[str, Mapping[str, Any]], None]
    ) -> None:
        self._path = socket_path
        self._on_event = on_event
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._names = {EVENT_BIT | code: name for name, code in EVENTS.items()}

    async def open(self, names: Sequence[str]) -> None:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(self._path)
                self._writer = writer
                await _send(writer, SUBSCRIBE, json.dumps(list(names)).encode())
                _, reply = await _receive(reader)
        except (OSError, EOFError, ValueError, TimeoutError) as exc:
            await self.close()
            raise SwayIpcError(f"cannot subscribe to sway's events: {exc}") from exc
        if not reply.get("success"):
            await self.close()
            raise SwayIpcError(f"sway refused the subscription to {', '.join(names)}")
        self._task = asyncio.create_task(self._read(reader), name="sway-events")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                kind, payload = await _receive(reader)
            except (OSError, EOFError, ValueError):
                return  # closed by us, or sway went away (the display link notices)
            name = self._names.get(kind)
            if name is not None and isinstance(payload, dict):
                self._on_event(name, payload)

    async def close(self) -> None:
        task, self._task = self._task, None
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

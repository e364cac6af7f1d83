"""A byte-exact HTTP/1.1 server on 127.0.0.1 for wire tests.

Written on asyncio streams (not an HTTP framework) so a responder controls every byte:
chunked framing, SSE and NDJSON lines, a socket dropped mid-body, comment lines, pacing.
Every request and every client disconnect is recorded with a ``time.monotonic()`` stamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOST = "127.0.0.1"

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    499: "Client Closed Request",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


@dataclass
class RecordedRequest:
    """One request as the server read it."""

    index: int
    method: str
    target: str
    """The raw request target: path plus query string."""
    headers: dict[str, str]
    """Header names lower-cased; a repeated header keeps its last value."""
    body: bytes
    at: float
    """``time.monotonic()`` when the request was fully read."""
    connection: int
    """Serial number of the TCP connection it came on (keep-alive reuse shows here)."""
    disconnected_at: float | None = None
    """Set when the client closed the connection while this request was answered."""
    chunks_sent: int = 0
    """Body pieces written so far (``Response.write`` calls); shows where a cancel landed."""
    finished: bool = False
    """The responder wrote its whole answer."""

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Disconnect:
    """The client closed a connection while a response was in progress."""

    request_index: int
    path: str
    at: float
    chunks_sent: int


class ClientGone(Exception):
    """Raised inside a responder when the client has closed the connection."""


class Response:
    """What a responder uses to answer one request."""

    def __init__(self, writer: asyncio.StreamWriter, record: RecordedRequest) -> None:
        self._writer = writer
        self.record = record
        self._chunked = False
        self.started = False
        self.gone = asyncio.Event()
        self.keep_alive = True

    async def _send(self, data: bytes) -> None:
        if self.gone.is_set() or self._writer.is_closing():
            raise ClientGone
        self._writer.write(data)
        try:
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone from exc

    async def start(
        self,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        *,
        chunked: bool = True,
        content_length: int | None = None,
    ) -> None:
        """Send the status line and headers; ``chunked`` selects the body framing."""
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
        all_headers = {"Date": _http_date(), "Server": "anyfill-loopback"}
        all_headers.update(headers or {})
        if content_length is not None:
            all_headers["Content-Length"] = str(content_length)
            chunked = False
        elif chunked:
            all_headers["Transfer-Encoding"] = "chunked"
        else:
            # No length and no chunking: the body ends when the connection closes.
            self.keep_alive = False
            all_headers["Connection"] = "close"
        if not self.keep_alive:
            all_headers["Connection"] = "close"
        lines.extend(f"{name}: {value}" for name, value in all_headers.items())
        self._chunked = chunked
        self.started = True
        await self._send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def write(self, data: bytes | str) -> None:
        """Send one body piece (one HTTP chunk when chunked)."""
        raw = data.encode() if isinstance(data, str) else data
        if not raw:
            return
        framed = b"%x\r\n%s\r\n" % (len(raw), raw) if self._chunked else raw
        await self._send(framed)
        self.record.chunks_sent += 1

    async def end(self) -> None:
        """Finish the body (the terminating zero chunk when chunked)."""
        if self._chunked:
            await self._send(b"0\r\n\r\n")
        self.record.finished = True

    async def body(
        self, status: int, body: bytes | str, headers: Mapping[str, str] | None = None
    ) -> None:
        """A whole response with Content-Length."""
        raw = body.encode() if isinstance(body, str) else body
        await self.start(status, headers, content_length=len(raw))
        await self._send(raw)
        self.record.chunks_sent += 1
        self.record.finished = True

    async def json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        merged = {"Content-Type": "application/json; charset=utf-8", **(headers or {})}
        await self.body(status, json.dumps(obj, ensure_ascii=False), merged)

    def drop(self) -> None:
        """Close the TCP connection at once, mid-body if a body was started (abort: RST)."""
        self.keep_alive = False
        transport = self._writer.transport
        transport.abort()

    async def sleep(self, seconds: float) -> None:
        """Wait, but stop early with :class:`ClientGone` when the client leaves."""
        if seconds <= 0:
            if self.gone.is_set():
                raise ClientGone
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.gone.wait(), seconds)
        if self.gone.is_set():
            raise ClientGone


Responder = Callable[[RecordedRequest, Response], Awaitable[None]]


def _http_date() -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())


class _BadRequest(Exception):
    pass


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine's own interface that is not 127.x (traffic to it
    stays on the machine, but anyfill must treat it as another host), or None."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # UDP connect sends nothing: picks the route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


class LoopbackServer:
    """HTTP/1.1 on 127.0.0.1 with an ephemeral port; records requests and disconnects.

    ``responder(request, response)`` answers every request; it is usually a protocol
    responder from :mod:`tests.servers` (``LlamaCpp()``, ``OpenAI()``, ...) or a
    :class:`Router` combining several. Use ``async with`` inside a test's loop, or
    :meth:`in_thread` from synchronous code (a bench script, a subprocess test).
    """

    def __init__(self, responder: Responder, host: str = HOST) -> None:
        self.responder = responder
        self.host = host
        """Where it listens: 127.0.0.1, or (a test of what anyfill sends to another machine)
        an address of this machine that is not loopback (:func:`non_loopback_address`)."""
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[Disconnect] = []
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._changed: asyncio.Condition | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> LoopbackServer:
        self._changed = asyncio.Condition()
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._server.wait_closed()
        self._server = None
        self._stopping = False

    async def __aenter__(self) -> LoopbackServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, responder: Responder, host: str = HOST) -> Iterator[LoopbackServer]:
        """Run the server in its own thread and event loop (for synchronous callers)."""
        server = cls(responder, host)
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(server.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(server.stop())
            loop.close()

        thread = threading.Thread(target=run, name="loopback-server", daemon=True)
        thread.start()
        if not ready.wait(10):
            raise RuntimeError("loopback server did not start")
        try:
            yield server
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    # -- waiting for what happened ---------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool], within: float = 5.0) -> None:
        """Wait (in the server's loop) until ``predicate()`` holds; TimeoutError otherwise."""
        assert self._changed is not None
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_disconnect(self, count: int = 1, within: float = 5.0) -> Disconnect:
        await self.wait_for(lambda: len(self.disconnects) >= count, within)
        return self.disconnects[count - 1]

    def wait_disconnect_sync(self, count: int = 1, within: float = 5.0) -> Disconnect:
        """Thread-safe polling variant for :meth:`in_thread` users."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.disconnects) >= count:
                    return self.disconnects[count - 1]
            time.sleep(0.005)
        raise TimeoutError(f"no disconnect #{count} within {within} s")

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # -- connection handling ------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self.connections += 1
        connection = self.connections
        buffer = bytearray()
        try:
            while True:
                try:
                    parsed = await _read_request(reader, buffer)
                except (_BadRequest, asyncio.IncompleteReadError, ConnectionError):
                    break
                if parsed is None:
                    break
                method, target, headers, body = parsed
                with self._lock:
                    record = RecordedRequest(
                        index=len(self.requests),
                        method=method,
                        target=target,
                        headers=headers,
                        body=body,
                        at=time.monotonic(),
                        connection=connection,
                    )
                    self.requests.append(record)
                await self._notify()
                response = Response(writer, record)
                if headers.get("connection", "").lower() == "close":
                    response.keep_alive = False
                keep = await self._answer(record, response, reader, buffer)
                await self._notify()
                if not keep:
                    break
        except asyncio.CancelledError:
            # Python 3.11's start_server logs a traceback for a handler that ends cancelled
            # (its done-callback calls task.exception()); stop() cancels us on purpose.
            if not self._stopping:
                raise
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _answer(
        self,
        record: RecordedRequest,
        response: Response,
        reader: asyncio.StreamReader,
        buffer: bytearray,
    ) -> bool:
        """Run the responder while watching the socket for the client leaving."""

        async def watch() -> None:
            data = await reader.read(65536)
            if data:  # a pipelined next request: keep it for the parser
                buffer.extend(data)
                await asyncio.Event().wait()
            response.gone.set()

        watcher = asyncio.create_task(watch())
        handler = asyncio.create_task(self.responder(record, response))
        gone_wait = asyncio.create_task(response.gone.wait())
        try:
            await asyncio.wait({handler, gone_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done():
                handler.cancel()
            with contextlib.suppress(asyncio.CancelledError, ClientGone):
                await handler
        finally:
            watcher.cancel()
            gone_wait.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        if response.gone.is_set() and not record.finished:
            record.disconnected_at = time.monotonic()
            with self._lock:
                self.disconnects.append(
                    Disconnect(
                        record.index, record.path, record.disconnected_at, record.chunks_sent
                    )
                )
            return False
        if not response.started:  # a responder that wrote nothing: say so loudly
            await response.json(500, {"error": "loopback responder sent nothing"})
        return response.keep_alive and not response.gone.is_set()


async def _read_request(
    reader: asyncio.StreamReader, buffer: bytearray
) -> tuple[str, str, dict[str, str], bytes] | None:
    async def read_until(sep: bytes) -> bytes:
        while sep not in buffer:
            data = await reader.read(65536)
            if not data:
                raise asyncio.IncompleteReadError(bytes(buffer), None)
            buffer.extend(data)
        index = buffer.index(sep) + len(sep)
        out = bytes(buffer[:index])
        del buffer[:index]
        return out

    async def read_exactly(count: int) -> bytes:
        while len(buffer) < count:
            data = await reader.read(65536)
            if not data:
                raise asyncio.IncompleteReadError(bytes(buffer), count)
            buffer.extend(data)
        out = bytes(buffer[:count])
        del buffer[:count]
        return out

    try:
        head = await read_until(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise _BadRequest(lines[0]) from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await read_until(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await read_until(b"\r\n")
                break
            parts.append(await read_exactly(size))
            await read_exactly(2)
        body = b"".join(parts)
    else:
        body = await read_exactly(int(headers.get("content-length", "0") or 0))
    return method, target, headers, body


@dataclass
class Router:
    """Send each request to the first responder whose ``handles(method, path)`` is true."""

    responders: list[Any] = field(default_factory=list)

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        for responder in self.responders:
            if responder.handles(request.method, request.path):
                await responder(request, response)
                return
        await response.json(404, {"error": f"no route for {request.method} {request.path}"})

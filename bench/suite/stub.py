"""A lean loopback stub of an OpenAI-style ``/v1/completions`` server for the benchmarks.

It runs in its own process (so its CPU never counts as the client's) on a bare
``asyncio.Protocol``: answering costs it about as little as a server can. It records when
each request arrived and when a client closed a connection in the middle of an answer
(``time.monotonic()``, which is system-wide on Linux, so the client process can compare).

Control: ``GET /_stats`` returns the records as JSON; ``POST /_reset`` clears them.

Cost model (``--base-ms``, ``--per-prompt-ms``, ``--slots``): a request waits for one of
``slots`` inference slots, then takes ``base + per_prompt x prompts`` before answering; that
stands for a local server whose fixed per-request cost (HTTP, tokenising, scheduling, the
first decode steps) dominates short FIM answers.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field

_TEXT_PIECES = ("    return", " a", " +", " b")


@dataclass
class StubOptions:
    chunks: int = 4
    """Text chunks per streamed answer."""
    chunk_delay_ms: float = 0.0
    """Pause between streamed chunks (0: all at once)."""
    base_ms: float = 0.0
    per_prompt_ms: float = 0.0
    slots: int = 0
    """Requests served at the same time (0: unlimited)."""


@dataclass
class StubStats:
    arrivals: list[float] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)
    requests: int = 0
    prompts: int = 0
    batch_sizes: list[int] = field(default_factory=list)


def _sse(piece: str, index: int) -> bytes:
    event = json.dumps(
        {
            "id": "cmpl-stub",
            "object": "text_completion",
            "created": 0,
            "model": "stub",
            "choices": [{"text": piece, "index": index, "logprobs": None, "finish_reason": None}],
        }
    )
    data = f"data: {event}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


_USAGE_EVENT = json.dumps(
    {
        "id": "cmpl-stub",
        "object": "text_completion",
        "created": 0,
        "model": "stub",
        "choices": [],
        "usage": {"prompt_tokens": 500, "completion_tokens": 4, "total_tokens": 504},
    }
)
_DONE = b"data: [DONE]\n\n"
_TAIL = (
    b"%x\r\n%s\r\n" % (len(f"data: {_USAGE_EVENT}\n\n"), f"data: {_USAGE_EVENT}\n\n".encode())
    + b"%x\r\n%s\r\n" % (len(_DONE), _DONE)
    + b"0\r\n\r\n"
)
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


class _Slots:
    """At most ``n`` requests in their costed phase at once, served in arrival order."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.busy = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self) -> None:
        if self.n <= 0:
            return
        if self.busy < self.n and not self.waiting:
            self.busy += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        await future

    def give(self) -> None:
        if self.n <= 0:
            return
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self.busy -= 1


class _Connection(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.answering = False
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.open_connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.open_connections -= 1
        if self.answering:
            self.server.stats.disconnects.append(time.monotonic())
        if self.task is not None:
            self.task.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer.extend(data)
        if not self.answering:
            self._try_request()

    def _try_request(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        _, _, rest = head.partition(" ")
        path = rest.partition(" ")[0]
        self.answering = True
        if path == "/_stats":
            self._send_json(self.server.stats_json())
        elif path == "/_reset":
            self.server.stats = StubStats()
            self._send_json(b"{}")
        else:
            self.server.stats.arrivals.append(time.monotonic())
            self.server.stats.requests += 1
            self._answer(body)

    def _send_json(self, payload: bytes) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )
        self._done()

    def _done(self) -> None:
        self.answering = False
        if self.buffer:
            self._try_request()

    def _answer(self, body: bytes) -> None:
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        prompt = request.get("prompt", "")
        prompts = prompt if isinstance(prompt, list) else [prompt]
        stats = self.server.stats
        stats.prompts += len(prompts)
        stats.batch_sizes.append(len(prompts))
        options = self.server.options
        if options.base_ms or options.per_prompt_ms or options.chunk_delay_ms:
            self.task = asyncio.get_running_loop().create_task(
                self._slow_answer(bool(request.get("stream")), len(prompts))
            )
            return
        self._write_answer(bool(request.get("stream")), len(prompts))
        self._done()

    async def _slow_answer(self, stream: bool, prompts: int) -> None:
        options = self.server.options
        slots = self.server.slots
        await slots.take()
        try:
            cost = options.base_ms + options.per_prompt_ms * prompts
            if cost:
                await asyncio.sleep(cost / 1000)
            if stream and options.chunk_delay_ms:
                assert self.transport is not None
                self.transport.write(_STREAM_HEAD)
                for index in range(options.chunks):
                    if not self._write(_sse(_TEXT_PIECES[index % len(_TEXT_PIECES)], 0)):
                        return
                    await asyncio.sleep(options.chunk_delay_ms / 1000)
                self._write(_TAIL)
            else:
                self._write_answer(stream, prompts)
        finally:
            slots.give()
            self.task = None
        self._done()

    def _write(self, data: bytes) -> bool:
        """Send ``data``; False when the client is gone (the connection was lost)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        transport.write(data)
        return True

    def _write_answer(self, stream: bool, prompts: int) -> None:
        transport = self.transport
        if transport is None:
            return
        options = self.server.options
        if stream:
            pieces = b"".join(
                _sse(_TEXT_PIECES[i % len(_TEXT_PIECES)], 0) for i in range(options.chunks)
            )
            transport.write(_STREAM_HEAD + pieces + _TAIL)
            return
        choices = [
            {"text": f" answer {i}", "index": i, "logprobs": None, "finish_reason": "stop"}
            for i in range(prompts)
        ]
        payload = json.dumps(
            {
                "id": "cmpl-stub",
                "object": "text_completion",
                "created": 0,
                "model": "stub",
                "choices": choices,
                "usage": {
                    "prompt_tokens": 500 * prompts,
                    "completion_tokens": 4 * prompts,
                    "total_tokens": 504 * prompts,
                },
            }
        ).encode()
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )


class StubServer:
    def __init__(self, options: StubOptions) -> None:
        self.options = options
        self.stats = StubStats()
        self.slots = _Slots(options.slots)
        self.open_connections = 0

    def stats_json(self) -> bytes:
        stats = self.stats
        return json.dumps(
            {
                "arrivals": stats.arrivals,
                "disconnects": stats.disconnects,
                "requests": stats.requests,
                "prompts": stats.prompts,
                "batch_sizes": stats.batch_sizes,
                "open_connections": self.open_connections,
            }
        ).encode()

    async def serve(self, port: int = 0) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(self), "127.0.0.1", port)
        bound = server.sockets[0].getsockname()[1]
        sys.stdout.write(f"{bound}\n")
        sys.stdout.flush()
        async with server:
            await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0)
    parser.add_argument("--base-ms", type=float, default=0.0)
    parser.add_argument("--per-prompt-ms", type=float, default=0.0)
    parser.add_argument("--slots", type=int, default=0)
    args = parser.parse_args(argv)
    options = StubOptions(
        chunks=args.chunks,
        chunk_delay_ms=args.chunk_delay_ms,
        base_ms=args.base_ms,
        per_prompt_ms=args.per_prompt_ms,
        slots=args.slots,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(StubServer(options).serve(args.port))


if __name__ == "__main__":
    main()

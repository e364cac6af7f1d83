"""What a scripted protocol responder answers: :class:`Reply`, and the base class."""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tests.servers.http import RecordedRequest, Response

ErrorKind = Literal[
    "auth",
    "forbidden",
    "rate_limit",
    "not_found",
    "bad_request",
    "server",
    "unsupported",
    "unavailable",
    "overloaded",
    "canceled",
]

DEFAULT_STATUS: dict[str, int] = {
    "auth": 401,
    "forbidden": 403,
    "rate_limit": 429,
    "not_found": 404,
    "bad_request": 400,
    "server": 500,
    "unsupported": 501,
    "unavailable": 503,
    "overloaded": 529,
    "canceled": 499,
}

SEED_ANSWER = 'lo World")'


@dataclass
class Reply:
    """One scripted answer; the protocol responder renders it in its own wire format.

    ``text`` is split into several chunks (``chunks`` overrides the split). An ``error``
    makes the responder answer with that protocol's documented error body instead.
    """

    text: str = SEED_ANSWER
    chunks: Sequence[str] | None = None
    batch: Sequence[str] | None = None
    """Per-prompt answers for a request carrying a list of prompts."""
    error: ErrorKind | None = None
    status: int | None = None
    """Overrides the error kind's usual status."""
    message: str = ""
    retry_after: str | None = None
    """``Retry-After`` header value (seconds or an HTTP date)."""
    retry_after_ms: str | None = None
    retry_delay: str | None = None
    """Gemini: ``RetryInfo.retryDelay`` in the 429 body, e.g. ``"22s"``."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Wait before the status line (a slow prefill)."""
    chunk_delay_s: float = 0.0
    """Wait before each text chunk (token pacing)."""
    drop_after: int | None = None
    """Abort the TCP connection after this many text chunks (mid-stream drop)."""
    garbage_after: int | None = None
    """Send one line that is not valid JSON after this many text chunks."""
    keepalives: int = 0
    """Keep-alive lines (SSE comments / Anthropic pings) before the first chunk."""
    midstream_error: str | None = None
    """An error reported inside a 200 stream after the chunks (Ollama, Anthropic, OpenAI)."""
    finish_reason: str = "stop"
    prompt_tokens: int = 7
    close_after: bool = False
    """Close the connection after a streamed answer without announcing it (llama-server
    does this): a client that reuses the socket finds it dead."""

    def pieces(self) -> list[str]:
        if self.chunks is not None:
            return list(self.chunks)
        return split_text(self.text)

    def error_status(self) -> int:
        assert self.error is not None
        return self.status or DEFAULT_STATUS[self.error]

    def error_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["Retry-After"] = self.retry_after
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = self.retry_after_ms
        return headers


def split_text(text: str) -> list[str]:
    """Split like a tokenizer would, roughly: short pieces, spaces leading."""
    return re.findall(r"\s*\S{1,4}|\s+", text, flags=re.DOTALL) or ([text] if text else [])


class Scripted:
    """Base of the protocol responders: a queue of replies and a default.

    ``push(Reply(...))`` scripts the next answers; when the queue is empty every request
    gets ``default``. Subclasses list their ``routes`` as ``(method, path regex)``.
    """

    routes: ClassVar[Sequence[tuple[str, str]]] = ()

    def __init__(self, *replies: Reply, default: Reply | None = None) -> None:
        self.queue: deque[Reply] = deque(replies)
        self.default = default or Reply()
        self._compiled = [(method, re.compile(pattern)) for method, pattern in self.routes]

    def push(self, *replies: Reply) -> None:
        self.queue.extend(replies)

    def next_reply(self) -> Reply:
        return self.queue.popleft() if self.queue else self.default

    def handles(self, method: str, path: str) -> bool:
        return any(m == method and rx.fullmatch(path) for m, rx in self._compiled)

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        raise NotImplementedError


async def stream_pieces(
    response: Response,
    reply: Reply,
    pieces: Sequence[str],
    render: Callable[[int, str], bytes],
    *,
    garbage: bytes,
    keepalive: bytes,
) -> bool:
    """Write the text chunks with the reply's pacing, drops and noise.

    Returns False when the connection was dropped on purpose (nothing more to send).
    """
    if reply.close_after:  # the headers are out: no "Connection: close" was announced
        response.keep_alive = False
    for _ in range(reply.keepalives):
        await response.sleep(reply.chunk_delay_s)
        await response.write(keepalive)
    for index, piece in enumerate(pieces):
        if reply.drop_after is not None and index == reply.drop_after:
            response.drop()
            return False
        if reply.garbage_after is not None and index == reply.garbage_after:
            await response.write(garbage)
        await response.sleep(reply.chunk_delay_s)
        await response.write(render(index, piece))
    if reply.drop_after is not None and reply.drop_after >= len(pieces):
        response.drop()
        return False
    return True


def sse(data: Any, event: str | None = None, *, sep: str = "\n") -> bytes:
    """One SSE event: ``event:`` line when named, a ``data:`` line, a blank line."""
    import json

    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}{sep}" if event else ""
    return f"{head}data: {payload}{sep}{sep}".encode()


def now() -> int:
    return int(time.time())


class KeyedScripted(Scripted):
    """A responder for an API that takes a key; ``api_key`` (when set) is the only one the
    server accepts, checked in the header that API uses."""

    def __init__(
        self, *replies: Reply, default: Reply | None = None, api_key: str | None = None
    ) -> None:
        super().__init__(*replies, default=default)
        self.api_key = api_key

"""What every HTTP backend shares: error mapping, SSE and NDJSON parsing, retry times.

Every foreign failure (httpx transport errors, HTTP error statuses, broken streams) leaves
this module as one of ``anyfill.daemon.errors``, with a message that names the backend and
says what to do about it.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

import httpx

from anyfill.daemon.backends.retry_times import requested_delay, retry_delay_from_body
from anyfill.daemon.errors import (
    AuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    BadRequest,
    ModelNotFound,
    ProtocolError,
    RateLimited,
    ServerError,
    UnsupportedFeature,
)
from anyfill.daemon.log import redact

__all__ = [
    "LineSplitter",
    "SseEvent",
    "error_for_status",
    "error_message",
    "iter_line_batches",
    "iter_ndjson",
    "iter_sse",
    "iter_sse_batches",
    "map_transport_errors",
    "parse_json",
    "retry_after_seconds",
    "transport_error",
]

_MAX_MESSAGE = 300


class SseEvent(NamedTuple):
    event: str
    """The ``event:`` name; ``"message"`` when the server gave none."""
    data: str


MAX_LINE_BYTES = 8 * 1024 * 1024
"""Longest line a stream may send: far above any event, bounds what one line can cost."""


class StreamTextError(ValueError):
    """A stream line is too long or not UTF-8 (the caller names the backend)."""


class LineSplitter:
    """Bytes in, complete lines out (without their ends: LF, CRLF or a lone CR), as UTF-8.

    Splitting before decoding is safe: in UTF-8 no byte of a multi-byte character is a CR
    or LF. Feed it each network read; ``flush`` returns a last line without an end. Only
    the new bytes are searched for line ends and a long line's pieces are joined once, so
    the cost stays linear in the line's length; a line over ``MAX_LINE_BYTES`` or bytes
    that are not UTF-8 raise ``StreamTextError`` (text with U+FFFD in it is never
    inserted).
    """

    __slots__ = ("_after_cr", "_pending", "_pending_size")

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._after_cr = False  # the last read ended in CR: an LF opening the next is its pair

    def feed(self, raw: bytes) -> list[str]:
        chunk = raw[1:] if self._after_cr and raw[:1] == b"\n" else raw
        if not chunk:
            return []
        self._after_cr = chunk[-1:] == b"\r"
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._pending.append(chunk)
            self._pending_size += len(chunk)
            if self._pending_size > MAX_LINE_BYTES:
                raise StreamTextError(f"a line longer than {MAX_LINE_BYTES // 2**20} MiB")
            return []
        *lines, rest = chunk.split(b"\n")
        if self._pending:
            lines[0] = b"".join([*self._pending, lines[0]])
        self._pending = [rest] if rest else []
        self._pending_size = len(rest)
        if len(lines[0]) > MAX_LINE_BYTES or self._pending_size > MAX_LINE_BYTES:
            raise StreamTextError(f"a line longer than {MAX_LINE_BYTES // 2**20} MiB")
        return [_decode(line) for line in lines]

    def flush(self) -> list[str]:
        pending, self._pending, self._pending_size = self._pending, [], 0
        return [_decode(b"".join(pending))] if pending else []


def _decode(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StreamTextError("text that is not valid UTF-8") from exc


def stream_text_error(backend: str, exc: StreamTextError) -> ProtocolError:
    return ProtocolError(
        backend, f"backend '{backend}' sent {exc}; its answer was refused, nothing inserted"
    )


def _plain(response: httpx.Response) -> bool:
    """No ``Content-Encoding``: the raw bytes are the body (else httpx decodes them)."""
    encoding: str = response.headers.get("content-encoding", "identity")
    return encoding == "identity"


async def iter_line_batches(response: httpx.Response) -> AsyncIterator[list[str]]:
    """The lines of a streamed body in batches: each holds the lines one network read
    completed (``LineSplitter``).

    Batches, because a generator hop per line is what a stream costs: a local server often
    sends many events in one read, and the readers above handle them in one go.
    ``Response.aiter_lines`` would stack four generators and an incremental text decoder
    on every chunk (``anyfill bench p2``). A body with a ``Content-Encoding`` goes through
    httpx's decoders.
    """
    if not _plain(response):
        async for text in response.aiter_lines():
            yield [text]
        return
    splitter = LineSplitter()
    async for raw in response.aiter_raw():
        lines = splitter.feed(raw)
        if lines:
            yield lines
    rest = splitter.flush()
    if rest:
        yield rest


class _SseParser:
    """Lines in, complete server-sent events out, as the SSE spec reads them: comment
    lines (``: keep-alive``) and fields other than ``event``/``data`` are skipped."""

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, lines: list[str]) -> list[SseEvent]:
        batch: list[SseEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    batch.append(SseEvent(self._event or "message", "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "error":
                # llama.cpp reports a failure inside the stream as an "error:" line.
                batch.append(SseEvent("error", value))
        return batch

    def flush(self) -> list[SseEvent]:
        """A last event without its blank line."""
        if not self._data:
            return []
        return [SseEvent(self._event or "message", "\n".join(self._data))]


async def iter_sse_batches(
    response: httpx.Response, backend: str, check: Callable[[], None] | None = None
) -> AsyncIterator[list[SseEvent]]:
    """Server-sent events from a streamed response, a batch per network read.

    A transport failure mid-stream becomes a ProtocolError. ``check`` runs on every read,
    so a deadline holds even while a server sends only keep-alives. One generator from
    the raw bytes to the events: each layer of generators costs on every read.
    """
    parser = _SseParser()
    try:
        if _plain(response):
            splitter = LineSplitter()
            async for raw in response.aiter_raw():
                if check is not None:
                    check()
                batch = parser.feed(splitter.feed(raw))
                if batch:
                    yield batch
            last = parser.feed(splitter.flush())
        else:
            last = []
            async for lines in iter_line_batches(response):
                if check is not None:
                    check()
                batch = parser.feed(lines)
                if batch:
                    yield batch
        last += parser.flush()
        if last:
            yield last
    except httpx.TransportError as exc:
        raise transport_error(backend, str(response.request.url), exc, streaming=True) from exc
    except StreamTextError as exc:
        raise stream_text_error(backend, exc) from exc
    except httpx.DecodingError as exc:
        raise undecodable(backend, response) from exc


async def iter_sse(
    response: httpx.Response, backend: str, check: Callable[[], None] | None = None
) -> AsyncIterator[SseEvent]:
    """The events of ``iter_sse_batches`` one by one."""
    async for batch in iter_sse_batches(response, backend, check):
        for event in batch:
            yield event


async def iter_ndjson(
    response: httpx.Response, backend: str, check: Callable[[], None] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """One JSON object per non-blank line (Ollama); a line that is not an object is an error."""
    with map_transport_errors(backend, str(response.request.url), streaming=True):
        async for lines in _checked_lines(response, backend):
            if check is not None:
                check()
            for line in lines:
                if not line.strip():
                    continue
                obj = parse_json(line, backend)
                if not isinstance(obj, dict):
                    raise ProtocolError(
                        backend, f"backend '{backend}' sent a line that is not an object"
                    )
                yield obj


async def _checked_lines(response: httpx.Response, backend: str) -> AsyncIterator[list[str]]:
    try:
        async for lines in iter_line_batches(response):
            yield lines
    except StreamTextError as exc:
        raise stream_text_error(backend, exc) from exc
    except httpx.DecodingError as exc:
        raise undecodable(backend, response) from exc


def undecodable(backend: str, response: httpx.Response) -> ProtocolError:
    encoding = response.headers.get("content-encoding", "?")
    return ProtocolError(
        backend,
        f"backend '{backend}' sent a body that its Content-Encoding ({encoding}) cannot decode",
    )


def cut_short(backend: str, marker: str) -> ProtocolError:
    """A stream that ended without its end marker: the connection closed mid-answer."""
    return ProtocolError(
        backend,
        f"backend '{backend}' ended the stream before {marker}: the connection closed in the "
        "middle of the answer (reset by the server or the network); nothing was inserted",
    )


def parse_json(text: str, backend: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        # The line may be the prompt or the answer: captured text, shown only on opt-in.
        hidden = f"a line of {len(text)} characters (privacy.log_text = true shows it)"
        shown = repr(redact(text if len(text) <= 80 else text[:77] + "..."))
        raise ProtocolError(
            backend,
            f"backend '{backend}' broke its stream format: {hidden} is not JSON "
            "(is the URL pointing at the right kind of server?)",
        ).hiding(hidden, shown) from exc


@contextlib.contextmanager
def map_transport_errors(backend: str, url: str, *, streaming: bool = False) -> Iterator[None]:
    """Turn httpx transport errors into anyfill errors that say what to check."""
    try:
        yield
    except httpx.TransportError as exc:
        raise transport_error(backend, url, exc, streaming=streaming) from exc


def transport_error(
    backend: str, url: str, exc: httpx.TransportError, *, streaming: bool = False
) -> BackendError:
    """The anyfill error for a failed connection, read or write."""
    where = origin(url)
    # Transports differ in how they report a refused connection (httpx-aiohttp raises
    # ConnectTimeout): the OS error underneath is what counts.
    if _caused_by(exc, ConnectionRefusedError) or (
        isinstance(exc, httpx.ConnectError) and not _caused_by(exc, socket.gaierror)
    ):
        return BackendUnavailable(
            backend,
            f"backend '{backend}': nothing listens on {where}; start the server or fix the "
            "backend's url",
        )
    if _caused_by(exc, socket.gaierror):
        return BackendUnavailable(
            backend, f"backend '{backend}': cannot resolve the host of {where}; check the url"
        )
    if isinstance(exc, httpx.ConnectTimeout):
        return BackendTimeout(
            backend,
            f"backend '{backend}': connecting to {where} timed out; check the URL and the "
            "network, or raise timeouts.connect_s",
        )
    if isinstance(exc, httpx.ReadTimeout):
        return BackendTimeout(
            backend,
            f"backend '{backend}' sent nothing for too long; the server may be overloaded or "
            "loading the model (raise timeouts.first_token_s if it is just slow)",
        )
    if isinstance(exc, httpx.TimeoutException):
        return BackendTimeout(backend, f"backend '{backend}': request timed out ({exc})")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError) and streaming:
        return ProtocolError(
            backend, f"backend '{backend}' dropped the connection in the middle of the answer"
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return BackendUnavailable(
            backend, f"backend '{backend}' closed the connection before answering ({exc})"
        )
    return BackendUnavailable(backend, f"backend '{backend}': connection to {where} failed ({exc})")


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind) or isinstance(getattr(current, "os_error", None), kind):
            return True  # (aiohttp's ClientConnectorError keeps the OS error in os_error)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (no path, no query: they may hold a key)."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{parsed.host}{port}"


def error_message(body: bytes) -> str:
    """The human part of an error body, whatever shape the API uses (shortened)."""
    return _shorten(_whole_message(body))


def _whole_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return " ".join(text.split())
    return " ".join((_find_message(obj) or text).split())


def _find_message(obj: Any) -> str:
    if isinstance(obj, list) and obj:
        return _find_message(obj[0])  # Gemini streams errors inside a JSON array
    if not isinstance(obj, dict):
        return str(obj) if isinstance(obj, str) else ""
    error = obj.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        return _find_message(error) or str(error.get("type", ""))
    for key in ("message", "detail"):
        value = obj.get(key)
        if isinstance(value, str):
            return value
        if value is not None:
            return json.dumps(value)[:_MAX_MESSAGE]
    return ""


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.-][A-Za-z0-9]+)*")
"""A documented error identifier (``invalid_api_key``, ``not_found_error``,
``INVALID_ARGUMENT``): one word, no spaces, so it cannot carry a sentence of the user's."""

_MAX_IDENTIFIER = 48

_CODE_FIELDS = ("code", "type", "status")
"""Where the APIs put their error identifier: OpenAI ``error.code``/``error.type``,
Anthropic ``error.type``, Gemini ``error.status``, llama.cpp ``error.type``."""


def error_code(body: bytes) -> str:
    """The short identifier an error body names (e.g. ``invalid_api_key``), or ``""``.

    Only documented identifier fields are read, and only a value shaped like an identifier
    is kept: it is not free text, so it is shown even when the message itself is hidden."""
    try:
        obj = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return ""
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if not isinstance(obj, dict):
        return ""
    error = obj.get("error")
    where = error if isinstance(error, dict) else obj
    for field in _CODE_FIELDS:
        value = where.get(field)
        if isinstance(value, str) and _is_identifier(value) and value != "error":
            return value
    return ""


def _is_identifier(value: str) -> bool:
    return len(value) <= _MAX_IDENTIFIER and _IDENTIFIER.fullmatch(value) is not None


class ServerWords(NamedTuple):
    """What a server said in an error body: its message and its error identifier."""

    message: str
    """The human message, whitespace collapsed (captured text: it may repeat the request)."""
    code: str
    """A documented identifier (``error_code``), or ``""``."""

    @classmethod
    def of(cls, body: bytes) -> ServerWords:
        return cls(_whole_message(body), error_code(body))


def retry_after_seconds(
    headers: Mapping[str, str], body: bytes = b"", *, now: float | None = None
) -> float | None:
    """When the server says to try again, in seconds from now; None when it does not say.

    Reads ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date) and, in the body,
    Gemini's ``RetryInfo.retryDelay`` (``"22s"``), as ``retry_times`` does for the scheduler.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    delay, _ = requested_delay(lowered, time.time() if now is None else now)
    return delay if delay is not None else retry_delay_from_body(body)


def error_for_status(
    backend: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    url: str,
    model: str = "",
    key_hint: str = "",
    sent: list[str] | None = None,
) -> BackendError:
    """The anyfill error for an HTTP error answer; the message names the backend and the fix.

    ``key_hint`` is appended to auth failures (e.g. which host a Codestral key works on).
    ``sent``: the request's strings (an identifier that is one of their words is hidden).
    The server's message is read to classify the failure, and is shown only as
    ``server_said`` allows (its length unless the user opted in).
    """
    words = ServerWords.of(body)
    said = server_said(words, sent)
    error = _mapped_error(
        backend,
        status,
        headers=headers,
        body=body,
        words=words,
        said=said.hidden,
        url=url,
        model=model,
        key_hint=key_hint,
    )
    error.server_message = words.message
    return said.into(error)


def _mapped_error(
    backend: str,
    status: int,
    *,
    headers: Mapping[str, str],
    body: bytes,
    words: ServerWords,
    said: str,
    url: str,
    model: str,
    key_hint: str,
) -> BackendError:
    lowered = words.message.lower()
    if status in (401, 403) or _is_bad_key(lowered, body):
        fix = (
            f"; store a valid key with 'anyfill config set-key {backend}' or set the "
            "backend's key_env variable"
        )
        return AuthError(
            backend,
            f"the API key for backend '{backend}' was refused{said}{fix}{key_hint}",
            status=status,
        )
    if status == 429 or (status in (503, 529) and "rate" in lowered):
        retry = retry_after_seconds(headers, body)
        when = f"; retry in {retry:g} s" if retry is not None else ""
        return RateLimited(
            backend,
            f"backend '{backend}' is rate limited{when}{said}",
            retry_after=retry,
            status=status,
        )
    if status == 404:
        if model and ("model" in lowered or "not found" in lowered or "not_found" in lowered):
            return ModelNotFound(
                backend,
                f"model '{model}' not found on backend '{backend}'{said}; check the model "
                "name (for Ollama: 'ollama pull' it)",
                status=status,
            )
        return ModelNotFound(
            backend,
            f"backend '{backend}' has no {httpx.URL(url).path} (404){said}; is the url right "
            "and is this the right backend type?",
            status=status,
        )
    if status == 501:
        return UnsupportedFeature(
            backend, f"backend '{backend}' does not support this{said}", status=status
        )
    if status in (400, 413, 422):
        if model and "model" in lowered and ("not exist" in lowered or "not found" in lowered):
            return ModelNotFound(
                backend, f"model '{model}' not found on backend '{backend}'{said}", status=status
            )
        return BadRequest(backend, f"backend '{backend}' rejected the request{said}", status=status)
    if status == 503 and lowered == "loading model":
        # llama.cpp answers every endpoint so while it loads (documented for /health).
        return ServerError(
            backend,
            f"backend '{backend}' is still loading its model (HTTP 503); try again when it is "
            "ready",
            status=status,
        )
    if status == 408 or status >= 500 or status == 499:
        return ServerError(
            backend, f"backend '{backend}' failed with HTTP {status}{said}", status=status
        )
    return BadRequest(backend, f"backend '{backend}' answered HTTP {status}{said}", status=status)


def request_strings(content: bytes) -> list[str]:
    """Every string in a JSON request body (prompt, prefix, suffix, messages...)."""
    try:
        body = json.loads(content) if content else None
    except ValueError:
        return [content.decode("utf-8", "replace")]
    found: list[str] = []
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


E = TypeVar("E", bound=BackendError)


class Said(NamedTuple):
    """What of an error body a message may show: ``hidden`` (no captured text) goes in
    the message, ``shown`` (the server's words) replaces it where the user opted in
    (``AnyfillError.hiding``)."""

    hidden: str
    shown: str

    def into(self, error: E) -> E:
        return error.hiding(self.hidden, self.shown)


def server_said(words: ServerWords, sent: list[str] | None = None) -> Said:
    """What of an error body a message may show.

    The body is captured text: a server may repeat the prompt in it, transformed
    (tokenised, escaped, truncated) beyond any echo check. So by default only its length
    is shown, with the documented error identifier, which is not free text (unless the
    request itself holds that word). Where the user opted in (privacy.log_text for the
    terminal and the log, privacy.mqtt_text for MQTT) the whole message shows, keys
    anyfill holds masked."""
    message, code = words
    if not message and not code:
        return Said("", "")
    shown = f" (server said: {redact(_shorten(message or code))})"
    if code and sent and any(code in text for text in sent):
        code = ""  # the "identifier" is a word of the user's text
    hidden = (
        f"{len(message)} characters, is hidden as it may repeat your text: set "
        "privacy.log_text = true to see it"
    )
    if message and message != code:
        if code:
            return Said(f" (server's error code: '{code}'; its message, {hidden})", shown)
        return Said(f" (the server's message, {hidden})", shown)
    return Said(f" (server's error code: '{code}')" if code else "", shown)


def stream_error_note(data: str) -> Said:
    """``server_said`` for an error event inside a stream (its JSON or plain text)."""
    return server_said(ServerWords.of(data.encode()))


def _is_bad_key(lowered: str, body: bytes) -> bool:
    # Gemini answers a bad key with a 400 INVALID_ARGUMENT whose reason is API_KEY_INVALID.
    return b"API_KEY_INVALID" in body or "api key not valid" in lowered

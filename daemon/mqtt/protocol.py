"""The JSON on the wire: requests checked strictly, every message read with bounds.

A request is validated whole (strict types, unknown fields refused, at most
``MAX_PAYLOAD`` bytes) before anything runs; what is wrong comes back as an error reply
naming the field, never as an exception that could stop the daemon. Every message from
the network (requests, cancels, replies, presences) is read by :func:`load_json`: at most
``MAX_PAYLOAD`` bytes and nesting at most ``MAX_DEPTH`` deep (jiter, the parser pydantic
uses, stops at a fixed depth where ``json.loads`` would raise ``RecursionError``), and a
bad one is a :class:`PayloadError`, nothing else. The replies are typed in
:mod:`.messages`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from typing import Any, Literal, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anyfill.daemon.completion import FimPrompt
from anyfill.daemon.errors import (
    AnyfillError,
    AuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    BadRequest,
    ModelNotFound,
    ProtocolError,
    RateLimited,
    RequestDropped,
    ServerError,
    Told,
    UnsupportedFeature,
)

MAX_PAYLOAD = 1 << 20
"""Largest request accepted (1 MiB): far above any context anyfill sends."""

MAX_DEPTH = 200
"""Deepest nesting read (jiter's own limit; no anyfill message nests more than 4 deep)."""

MAX_RETRY_AFTER_S = 3600.0
"""A worker's ``retry_after`` above this (or not finite) is not believed."""

INSERT_SKEW_S = 60
"""How far a signed insert request's ``at`` may be from this host's clock."""

Priority = Literal["interactive", "prefetch", "batch"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RequestOptions(_Strict):
    max_tokens: int | None = Field(None, ge=1, le=32768)
    single_line: bool | None = None
    language: str = Field("", max_length=64)
    filename: str = Field("", max_length=4096)
    priority: Priority = "interactive"


class NodeRequest(_Strict):
    """A completion asked of one daemon on ``<prefix>/<node>/request``."""

    id: str | None = Field(None, min_length=1, max_length=128)
    prefix: str = ""
    suffix: str = ""
    backends: list[str] = Field(default_factory=list, max_length=16)
    options: RequestOptions = Field(default_factory=RequestOptions)
    target: str | None = Field(None, max_length=256)
    """Requests with the same target supersede each other (latest wins); none: independent."""
    response_topic: str | None = Field(None, min_length=1, max_length=1024)
    """For MQTT 3.1.1 clients, which have no Response Topic property."""
    insert: bool = False
    """Type the completion into the desktop at the caret (off unless the user allows it)."""
    at: int | None = Field(None, ge=0, le=2**40)
    """An insert request: when it was signed (Unix seconds)."""
    sig: str | None = Field(None, min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")
    """An insert request: HMAC-SHA256 of :func:`insert_message` under the shared insert key."""


class CancelRequest(_Strict):
    id: str = Field(min_length=1, max_length=128)


class PoolRequest(_Strict):
    """One FIM prompt handed to a worker pool: the desktop has trimmed and decided already."""

    id: str = Field(min_length=1, max_length=128)
    prefix: str
    suffix: str
    max_tokens: int = Field(0, ge=0, le=32768)
    temperature: float = Field(0.1, ge=0, le=2)
    stop: list[str] = Field(default_factory=list, max_length=32)
    single_line: bool = False
    language: str = ""
    filename: str = ""
    extra: list[tuple[str, str]] = Field(default_factory=list)
    priority: Priority = "interactive"
    deadline_ms: int | None = Field(None, ge=1)
    """Time left to start answering when it was sent (MQTT 5 expiry is whole seconds)."""

    @classmethod
    def of(cls, request_id: str, prompt: FimPrompt, deadline_ms: int) -> PoolRequest:
        """The desktop's side: ours, and checked by the worker, so built unchecked (no
        prompt can fail here)."""
        return cls.model_construct(
            id=request_id,
            prefix=prompt.prefix,
            suffix=prompt.suffix,
            max_tokens=prompt.max_tokens,
            temperature=prompt.temperature,
            stop=list(prompt.stop),
            single_line=prompt.single_line,
            language=prompt.language,
            filename=prompt.filename,
            extra=list(prompt.extra),
            deadline_ms=deadline_ms,
        )

    def to_bytes(self) -> bytes:
        return self.model_dump_json(exclude_defaults=True).encode()

    def prompt(self) -> FimPrompt:
        """The worker's side: the prompt for its own backends."""
        return FimPrompt(
            prefix=self.prefix,
            suffix=self.suffix,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            stop=tuple(self.stop),
            single_line=self.single_line,
            language=self.language,
            filename=self.filename,
            extra=tuple(self.extra),
            request_id=self.id,
        )


class PayloadError(Exception):
    """A request that cannot be served as sent; ``request_id`` when it could be read."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


M = TypeVar("M", bound=BaseModel)


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item["loc"]) or "payload"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def load_json(payload: bytes, limit: int = MAX_PAYLOAD) -> Any:
    """``payload`` parsed, within ``limit`` bytes and :data:`MAX_DEPTH` levels, or a
    :class:`PayloadError`: the one way anyfill reads JSON that came over the network."""
    if len(payload) > limit:
        raise PayloadError(f"payload of {len(payload)} bytes is over the {limit} limit")
    try:
        # jiter refuses invalid UTF-8, lone surrogate escapes and nesting past its limit
        return pydantic_core.from_json(payload, cache_strings=False)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"payload is not JSON: {exc}") from None


def parse(model: type[M], payload: bytes) -> M:
    """``payload`` as ``model``, or a :class:`PayloadError` that says what is wrong."""
    data = load_json(payload)
    request_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(request_id, str):
        request_id = None
    if not isinstance(data, dict):
        raise PayloadError("payload must be a JSON object", request_id)
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        raise PayloadError(f"invalid request: {_describe(exc)}", request_id) from None
    except (ValueError, RecursionError) as exc:  # pydantic's own parser, should it differ
        raise PayloadError(f"payload is not JSON: {exc}", request_id) from None


_TOPIC_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f+#\ud800-\udfff\ufffe\uffff]")


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` cannot be published to, or None.

    A reply topic comes from the network; publishing to one with U+0000 or a control
    character makes the broker drop this whole connection as malformed (MQTT 5 §1.5.4),
    and ``+``/``#`` are for subscriptions only (paho raises on them)."""
    if not topic:
        return "the reply topic is empty"
    if topic.startswith("$"):
        return "the reply topic starts with '$' (reserved for the broker)"
    if _TOPIC_FORBIDDEN.search(topic):
        return "the reply topic holds a wildcard ('+', '#'), a control character or U+0000"
    if len(topic.encode("utf-8", "surrogatepass")) > 1024:
        return "the reply topic is over 1024 bytes"
    return None


def insert_message(base: str, request_id: str, at: int) -> bytes:
    """What an insert request signs: its node's topic base, its id and its time."""
    return f"anyfill-insert\n{base}\n{request_id}\n{at}".encode()


def sign_insert(key: str, base: str, request_id: str, at: int) -> str:
    """The ``sig`` of an insert request (hex HMAC-SHA256), for scripts and tests."""
    digest = hmac.new(key.encode(), insert_message(base, request_id, at), hashlib.sha256)
    return digest.hexdigest()


def insert_signed(key: str, base: str, request: NodeRequest, now: float) -> str | None:
    """Why ``request`` is not a valid signed insert request, or None when it is."""
    if request.sig is None or request.at is None or request.id is None:
        return "an insert request needs 'id', 'at' and 'sig' (see docs/mqtt.md)"
    if abs(now - request.at) > INSERT_SKEW_S:
        return f"the insert request was signed {now - request.at:.0f} s from now (clock skew?)"
    expected = sign_insert(key, base, request.id, request.at)
    if not hmac.compare_digest(expected, request.sig):
        return "the insert request's signature does not match this node's insert key"
    return None


def dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


_KINDS: dict[str, type[BackendError]] = {
    "rate_limited": RateLimited,
    "unavailable": BackendUnavailable,
    "timeout": BackendTimeout,
    "server_error": ServerError,
    "protocol_error": ProtocolError,
    "auth": AuthError,
    "not_found": ModelNotFound,
    "bad_request": BadRequest,
    "unsupported": UnsupportedFeature,
}


def error_kind(error: BaseException) -> str:
    if isinstance(error, RequestDropped):
        return "cancelled" if error.reason == "cancelled" else "dropped"
    for kind, cls in _KINDS.items():
        if isinstance(error, cls):
            return kind
    if isinstance(error, AnyfillError):
        return "error"
    return "internal"


_LOG_HINT = "privacy.log_text = true"
_MQTT_HINT = "privacy.mqtt_text = true"


def published(said: BaseException | Told, *, with_text: bool) -> str:
    """An error's message for the broker: captured text (a server's words, which may
    repeat the prompt) only ``with_text`` (``privacy.mqtt_text``), whatever the log shows;
    without it a foreign exception (a bug) is only named, and the hint names the switch
    that shows the text here."""
    told = said if isinstance(said, Told) else Told.of(said)
    text = told.text(with_text=with_text)
    if not with_text:
        text = text.replace(_LOG_HINT, _MQTT_HINT)
    if not text and isinstance(said, BaseException):
        return type(said).__name__
    return text


def error_json(
    error: BaseException, *, with_text: bool, for_worker_link: bool = False
) -> dict[str, Any]:
    """The ``error`` object of a failed reply.

    ``for_worker_link``: a worker's reply to a desktop, which shows the error under its own
    switches: ``message`` is always without captured text, and ``message_with_text`` (only
    when this side's ``privacy.mqtt_text`` allows it) the whole message."""
    message = published(error, with_text=with_text and not for_worker_link)
    body: dict[str, Any] = {"kind": error_kind(error), "message": message}
    if for_worker_link and with_text:
        whole = published(error, with_text=True)
        if whole != message:
            body["message_with_text"] = whole
    if isinstance(error, RateLimited) and error.retry_after is not None:
        body["retry_after"] = error.retry_after
    if isinstance(error, BackendError) and error.status is not None:
        body["status"] = error.status
    return body


def error_from_json(backend: str, data: Any) -> BackendError:
    """A worker's error as the desktop's own: the same class, so the same fallback rule."""
    if isinstance(data, BaseModel):
        data = data.model_dump(exclude_none=True)
    if not isinstance(data, dict):
        return ProtocolError(backend, f"'{backend}' sent a malformed error")
    kind = str(data.get("kind", ""))[:64]
    said = str(data.get("message", kind))
    message = f"'{backend}' (worker): {said}"
    error = _worker_error(backend, kind, message, data)
    whole = data.get("message_with_text")
    if isinstance(whole, str):  # the worker's user let it publish the server's words
        error.hiding(said, whole)  # shown here only as this side's switches allow
    return error


def _retry_after(value: Any) -> float | None:
    """A worker's ``retry_after`` when believable: finite, 0..MAX_RETRY_AFTER_S."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an integer of 400 digits
        return None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_RETRY_AFTER_S:
        return None
    return seconds


def _worker_error(backend: str, kind: str, message: str, data: dict[str, Any]) -> BackendError:
    if kind == "rate_limited":
        return RateLimited(backend, message, retry_after=_retry_after(data.get("retry_after")))
    cls = _KINDS.get(kind)
    if cls is not None:
        status = data.get("status")
        return cls(backend, message, status=status if isinstance(status, int) else None)
    # dropped at the worker (its deadline) or an internal failure: another backend may answer
    return BackendTimeout(backend, message) if kind == "dropped" else ServerError(backend, message)


__all__ = [
    "INSERT_SKEW_S",
    "MAX_DEPTH",
    "MAX_PAYLOAD",
    "CancelRequest",
    "NodeRequest",
    "PayloadError",
    "PoolRequest",
    "RequestOptions",
    "dumps",
    "error_from_json",
    "error_json",
    "error_kind",
    "insert_message",
    "insert_signed",
    "load_json",
    "parse",
    "published",
    "sign_insert",
    "topic_problem",
]

"""The JSON on the wire: requests checked strictly, replies built in one way.

A request is validated whole (strict types, unknown fields refused, at most
``MAX_PAYLOAD`` bytes) before anything runs; what is wrong comes back as an error reply
naming the field, never as an exception that could stop the daemon.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from anyfill.daemon.backends.base import Plan, Usage
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


def parse(model: type[M], payload: bytes) -> M:
    """``payload`` as ``model``, or a :class:`PayloadError` that says what is wrong."""
    if len(payload) > MAX_PAYLOAD:
        raise PayloadError(f"payload of {len(payload)} bytes is over the {MAX_PAYLOAD} limit")
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"payload is not JSON: {exc}") from None
    request_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(request_id, str):
        request_id = None
    if not isinstance(data, dict):
        raise PayloadError("payload must be a JSON object", request_id)
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        raise PayloadError(f"invalid request: {_describe(exc)}", request_id) from None


def dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "mode": plan.mode,
        "template": plan.template,
        "stop": list(plan.stop),
        "note": plan.note,
    }


def plan_from_json(data: Any) -> Plan:
    if not isinstance(data, dict) or data.get("mode") not in ("native", "template", "chat"):
        raise ValueError(f"not a plan: {data!r}")
    return Plan(
        mode=data["mode"],
        template=str(data.get("template", "")),
        stop=tuple(str(s) for s in data.get("stop", ())),
        note=str(data.get("note", "")),
    )


def usage_json(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}


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
    if not isinstance(data, dict):
        return ProtocolError(backend, f"'{backend}' sent a malformed error: {data!r}")
    kind = str(data.get("kind", ""))
    said = str(data.get("message", kind))
    message = f"'{backend}' (worker): {said}"
    error = _worker_error(backend, kind, message, data)
    whole = data.get("message_with_text")
    if isinstance(whole, str):  # the worker's user let it publish the server's words
        error.hiding(said, whole)  # shown here only as this side's switches allow
    return error


def _worker_error(backend: str, kind: str, message: str, data: dict[str, Any]) -> BackendError:
    if kind == "rate_limited":
        retry = data.get("retry_after")
        return RateLimited(
            backend, message, retry_after=float(retry) if isinstance(retry, int | float) else None
        )
    cls = _KINDS.get(kind)
    if cls is not None:
        status = data.get("status")
        return cls(backend, message, status=status if isinstance(status, int) else None)
    # dropped at the worker (its deadline) or an internal failure: another backend may answer
    return BackendTimeout(backend, message) if kind == "dropped" else ServerError(backend, message)


__all__ = [
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
    "parse",
    "plan_from_json",
    "plan_json",
    "published",
    "usage_json",
]

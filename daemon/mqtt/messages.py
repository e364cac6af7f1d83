"""The replies and presences on the wire, typed: built by the node and the worker, read by
the desktop's pool link, in one shape.

A reply is a ``chunk`` (text as it streams) or one ``final`` (the answer or the error).
The node's replies go to any MQTT client; the worker's go to a desktop, which reads them
with :func:`read_reply`: bounded (:func:`~.protocol.load_json`: size and depth, which
bound every field), validated, unknown fields ignored (a newer worker may add some), and
anything else a :class:`~.protocol.PayloadError`. Building a message never fails on its
text's length: the engine bounds an answer, the reader a message.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from anyfill.daemon.completion import Plan, Usage
from anyfill.daemon.mqtt.protocol import PayloadError, dumps, load_json


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    def to_bytes(self) -> bytes:
        body = self.model_dump(exclude_none=True)
        if "id" in type(self).model_fields:
            body.setdefault("id", None)  # every reply names its request, even unknown
        return dumps(body)


class PlanInfo(_Message):
    mode: Literal["native", "template", "chat"]
    template: str = ""
    stop: list[str] = Field(default_factory=list)
    note: str = ""

    @classmethod
    def of(cls, plan: Plan) -> PlanInfo:
        return cls(mode=plan.mode, template=plan.template, stop=list(plan.stop), note=plan.note)

    def plan(self) -> Plan:
        return Plan(self.mode, self.template, tuple(self.stop), self.note)


class UsageInfo(_Message):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @classmethod
    def of(cls, usage: Usage) -> UsageInfo:
        return cls(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens, self.completion_tokens)


class ErrorInfo(_Message):
    """A failure: ``kind`` for programs, ``message`` in anyfill's own words."""

    kind: str
    message: str = ""
    message_with_text: str | None = None
    retry_after: float | None = None
    """Checked by :func:`~.protocol.error_from_json`, which ignores what is not believable."""
    status: int | None = None


class Chunk(_Message):
    type: Literal["chunk"] = "chunk"
    id: str | None = None
    seq: int | None = None
    """The node numbers its chunks; a worker's arrive in order on one connection."""
    text: str = ""
    replace: bool | None = None
    """True: a fallback backend started over, its text replaces what was sent."""
    plan: PlanInfo | None = None
    worker: str | None = None


class Final(_Message):
    type: Literal["final"] = "final"
    id: str | None = None
    ok: bool
    middle: str | None = None
    backend: str | None = None
    ms: float | None = None
    first_token_ms: float | None = None
    usage: UsageInfo | None = None
    plan: PlanInfo | None = None
    inserted: Literal["requested"] | None = None
    error: ErrorInfo | None = None
    worker: str | None = None

    @classmethod
    def failure(cls, request_id: str | None, kind: str, message: str) -> Final:
        return cls(id=request_id, ok=False, error=ErrorInfo(kind=kind, message=message))

    @classmethod
    def failed(cls, request_id: str | None, error: dict[str, Any]) -> Final:
        """From :func:`~.protocol.error_json`'s body."""
        return cls(id=request_id, ok=False, error=ErrorInfo.model_validate(error))


Reply = Annotated[Chunk | Final, Field(discriminator="type")]
_REPLY: TypeAdapter[Chunk | Final] = TypeAdapter(Reply)


def read_reply(payload: bytes) -> Chunk | Final:
    """A reply from the network, or a :class:`PayloadError` saying what is wrong."""
    load_json(payload)  # size and depth first: pydantic would read any size
    try:
        return _REPLY.validate_json(payload)
    except (ValidationError, ValueError) as exc:
        raise PayloadError(f"a malformed reply: {str(exc)[:200]}") from None


class Presence(_Message):
    """A worker's retained announcement on ``<prefix>/fim/<pool>/workers/<id>``."""

    state: Literal["online"]
    worker: str | None = None
    since: float | None = None
    backends: list[str] = Field(default_factory=list)


def read_presence(payload: bytes) -> Presence | None:
    """A presence, or None for an empty payload (the Will: gone) or anything else."""
    if not payload:
        return None
    try:
        load_json(payload, limit=16 * 1024)
        return Presence.model_validate_json(payload)
    except (PayloadError, ValidationError, ValueError):
        return None


__all__ = [
    "Chunk",
    "ErrorInfo",
    "Final",
    "PlanInfo",
    "Presence",
    "Reply",
    "UsageInfo",
    "read_presence",
    "read_reply",
]

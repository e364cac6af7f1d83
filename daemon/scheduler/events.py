"""Events the scheduler publishes on the bus.

No captured text in any of them, except where an error's message may hold a server's
words: their ``reason`` follows ``privacy.log_text`` as the log does, and their ``cause``
(the message in both forms) lets MQTT apply ``privacy.mqtt_text`` instead."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from anyfill.daemon.errors import (
    AuthError,
    BackendTimeout,
    BackendUnavailable,
    BadRequest,
    ModelNotFound,
    ProtocolError,
    RateLimited,
    ServerError,
    Told,
    UnsupportedFeature,
)

Outcome = Literal[
    "ok",
    "cache",
    "rate_limited",
    "server_error",
    "timeout",
    "unavailable",
    "protocol_error",
    "auth",
    "not_found",
    "bad_request",
    "unsupported",
    "error",
    "cooling",
    "cancelled",
    "superseded",
    "deadline",
    "hedge_lost",
]


def outcome_of(error: BaseException) -> Outcome:
    """How a failed attempt is counted in metrics (and, for retryable ones, cooled)."""
    if isinstance(error, RateLimited):
        return "rate_limited"
    if isinstance(error, ServerError):
        return "server_error"
    if isinstance(error, BackendTimeout):
        return "timeout"
    if isinstance(error, BackendUnavailable):
        return "unavailable"
    if isinstance(error, ProtocolError):
        return "protocol_error"
    if isinstance(error, AuthError):
        return "auth"
    if isinstance(error, ModelNotFound):
        return "not_found"
    if isinstance(error, BadRequest):
        return "bad_request"
    if isinstance(error, UnsupportedFeature):
        return "unsupported"
    return "error"


@dataclass(frozen=True)
class AttemptFinished:
    """One backend's part in one request."""

    request_id: str
    backend: str
    outcome: Outcome
    queue_wait_ms: float | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    reason: str = ""
    batched: int = 0
    """Number of prompts in the HTTP request this one travelled in (0: not batched)."""

    @property
    def topic(self) -> str:
        return f"events/backends/{self.backend}/attempt"


@dataclass(frozen=True)
class CooldownChanged:
    backend: str
    cooling: bool
    seconds_left: float = 0.0
    reason: str = ""
    """Why, as the terminal, the log and the tray may say it (``privacy.log_text``)."""
    cause: Told | None = field(default=None, compare=False, repr=False)
    """The failure behind it, for MQTT to tell under ``privacy.mqtt_text``."""

    @property
    def topic(self) -> str:
        return f"state/backends/{self.backend}/cooldown"


@dataclass(frozen=True)
class BackendMetrics:
    """A running summary per backend, for the tray and MQTT (retained)."""

    backend: str
    requests: int
    outcomes: tuple[tuple[str, int], ...]
    queue_wait_ms_p50: float | None
    first_token_ms_p50: float | None
    first_token_ms_p95: float | None
    total_ms_p50: float | None
    in_flight: int
    queued: int
    cooling_seconds_left: float
    cooling_reason: str
    prompt_tokens_today: int
    completion_tokens_today: int
    cost_today: float

    @property
    def topic(self) -> str:
        return f"state/backends/{self.backend}/metrics"

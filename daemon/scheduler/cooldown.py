"""Health of one quota key: whether a backend may be asked now.

A backend cools down after a retryable failure: exactly as long as the server asked when
it said (Retry-After and friends), else a short default that doubles with consecutive
failures. While cooling, the scheduler sends it nothing and falls back instead. The state
is shared by every backend with the same API key and URL, since they share one quota.
"""

from __future__ import annotations

from dataclasses import dataclass

from anyfill.daemon.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    RateLimited,
    ServerError,
)

#: (first cooldown, cap) in seconds when the server did not say how long to wait.
DEFAULT_COOLDOWN_S: dict[str, tuple[float, float]] = {
    "rate_limited": (5.0, 60.0),
    "server_error": (2.0, 30.0),
    "timeout": (5.0, 60.0),
    "unavailable": (1.0, 15.0),
    "protocol_error": (1.0, 15.0),
}


def failure_kind(error: BaseException) -> str:
    if isinstance(error, RateLimited):
        return "rate_limited"
    if isinstance(error, ServerError):
        return "server_error"
    if isinstance(error, BackendTimeout):
        return "timeout"
    if isinstance(error, BackendUnavailable):
        return "unavailable"
    return "protocol_error"


@dataclass
class Health:
    cooling_until: float = 0.0
    reason: str = ""
    kind: str = ""
    failures: int = 0
    """Consecutive retryable failures (reset by a success)."""

    def cooling(self, now: float) -> bool:
        return now < self.cooling_until

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.cooling_until - now)

    def fail(self, now: float, error: BackendError, server_delay: float | None) -> float:
        """Record a retryable failure; returns the cooldown in seconds."""
        self.failures += 1
        kind = failure_kind(error)
        if server_delay is not None:
            delay = server_delay
        else:
            first, cap = DEFAULT_COOLDOWN_S[kind]
            delay = min(cap, first * 2 ** min(self.failures - 1, 16))
        until = now + delay
        if until > self.cooling_until:
            self.cooling_until = until
            self.reason = str(error)
            self.kind = kind
        return delay

    def hold_until(self, until: float, reason: str) -> None:
        """The server said a quota is used up until ``until`` (no failure yet)."""
        if until > self.cooling_until:
            self.cooling_until = until
            self.reason = reason
            self.kind = "rate_limited"

    def succeed(self) -> None:
        self.failures = 0

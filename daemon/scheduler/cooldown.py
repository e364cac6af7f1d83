"""Health of one quota key: whether a backend may be asked now.

A backend cools down after a retryable failure: exactly as long as the server asked when
it said (Retry-After and friends), else a short default that doubles with consecutive
failures. While cooling, the scheduler falls back to other backends instead. A *hard*
cooldown (a rate limit, or any wait the server asked for) is never broken: the request
fails at once with the wait. A *soft* one (5xx, timeout, connection error with no word
from the server) only moves the backend to the end of the chain, so a single local server
that hiccupped once is still asked (LiteLLM's single-deployment cooldowns confuse users).
The state is shared by every backend with the same API key and URL: one quota.
"""

from __future__ import annotations

from dataclasses import dataclass

from anyfill.daemon.errors import BackendError, Told
from anyfill.daemon.scheduler.events import outcome_of

MAX_SERVER_COOLDOWN_S = 300.0
"""Longest pause a server's word (Retry-After, a quota reset) buys: after it one request
goes out again as a probe, so a mistaken or hostile ``Retry-After: 999999`` costs minutes,
not a week of failed presses. A server still out of quota answers 429 again."""

#: (first cooldown, cap) in seconds when the server did not say how long to wait.
DEFAULT_COOLDOWN_S: dict[str, tuple[float, float]] = {
    "rate_limited": (5.0, 60.0),
    "server_error": (2.0, 30.0),
    "timeout": (5.0, 60.0),
    "unavailable": (1.0, 15.0),
    "protocol_error": (1.0, 15.0),
}


def failure_kind(error: BaseException) -> str:
    """The cooldown a failure earns: its outcome, or "protocol_error" for any other kind."""
    kind = outcome_of(error)
    return kind if kind in DEFAULT_COOLDOWN_S else "protocol_error"


@dataclass
class Health:
    cooling_until: float = 0.0
    cause: Told | None = None
    """The failure that started the cooldown, told (its message may hold captured text)."""
    note: str = ""
    """Our own words for a cooldown no failure started (``hold_until``)."""
    kind: str = ""
    failures: int = 0
    """Consecutive retryable failures (reset by a success)."""
    hard: bool = False
    """The server asked for the wait (or it is a rate limit): send nothing until it ends."""

    @property
    def reason(self) -> str:
        """Why it cools, as the terminal and the log may say it (``privacy.log_text``)."""
        return str(self.cause) if self.cause is not None else self.note

    def reason_told(self, *, with_text: bool) -> str:
        """Why it cools, for a channel with its own privacy switch (MQTT)."""
        return self.cause.text(with_text=with_text) if self.cause is not None else self.note

    def blocked(self, now: float) -> bool:
        """Cooling hard: no request may go out."""
        return self.hard and now < self.cooling_until

    def cooling(self, now: float) -> bool:
        return now < self.cooling_until

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.cooling_until - now)

    def fail(self, now: float, error: BackendError, server_delay: float | None) -> float:
        """Record a retryable failure; returns the cooldown in seconds."""
        self.failures += 1
        kind = failure_kind(error)
        if server_delay is not None:
            delay = min(max(server_delay, 0.0), MAX_SERVER_COOLDOWN_S)
        else:
            first, cap = DEFAULT_COOLDOWN_S[kind]
            delay = min(cap, first * 2 ** min(self.failures - 1, 16))
        until = now + delay
        if until > self.cooling_until:
            self.cooling_until = until
            self.cause, self.note = Told.of(error), ""
            self.kind = kind
            self.hard = server_delay is not None or kind == "rate_limited"
        return delay

    def hold_until(self, until: float, reason: str, now: float | None = None) -> None:
        """The server said a quota is used up until ``until`` (no failure yet); with ``now``
        the pause is capped at ``MAX_SERVER_COOLDOWN_S``."""
        if now is not None:
            until = min(until, now + MAX_SERVER_COOLDOWN_S)
        if until > self.cooling_until:
            self.cooling_until = until
            self.cause, self.note = None, reason
            self.kind = "rate_limited"
            self.hard = True

    def succeed(self) -> None:
        """It answered: a soft cooldown is over (a hard one lasts as the server asked)."""
        self.failures = 0
        if not self.hard:
            self.cooling_until = 0.0

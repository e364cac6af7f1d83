"""What a server's answer says about when to ask it again.

Folds every rate-limit signal we know into one "wait this many seconds" figure:

- ``retry-after-ms`` before ``Retry-After``, read by ``backends/retry_times`` (the same
  reading gives a backend's ``RateLimited.retry_after``);
- OpenAI ``x-ratelimit-{remaining,reset}-{requests,tokens}`` with Go-style durations
  (``12ms``, ``1s``, ``6m0s``);
- Anthropic ``anthropic-ratelimit-*-{remaining,reset}`` with RFC 3339 timestamps;
- Mistral ``x-ratelimit-remaining-{req,tokens}-minute`` (the quota refills within a minute)
  and relative-seconds resets;
- ``x-should-retry: false``.

Unlike LiteLLM we honour ``retry-after-ms`` and fractional values. The figure is the
server's; ``cooldown.Health`` caps the pause it causes (``MAX_SERVER_COOLDOWN_S``) and
then probes, so a wrong or hostile ``Retry-After: 999999`` does not lock a backend out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from anyfill.daemon.backends.retry_times import clamp_delay, parse_duration, requested_delay


@dataclass(frozen=True)
class RateFeedback:
    retry_after: float | None = None
    """Seconds until the server wants to hear from us again (None: it did not say)."""
    should_retry: bool | None = None
    """The server's ``x-should-retry`` verdict, when it gave one."""
    source: str = ""
    """Which header the delay came from, for logs and the tray."""


def parse_timestamp(value: str, wall_now: float) -> float | None:
    """An RFC 3339 timestamp (Anthropic resets) as seconds from now."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return clamp_delay(max(0.0, when.timestamp() - wall_now))


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value.strip()))
    except ValueError:
        return None


def _exhausted_resets(headers: Mapping[str, str], wall_now: float) -> list[float]:
    """Reset delays of every quota the headers say is used up (remaining <= 0)."""
    delays: list[float] = []
    # OpenAI (and OpenAI-style): durations.
    for resource in ("requests", "tokens"):
        remaining = _int(headers.get(f"x-ratelimit-remaining-{resource}"))
        reset = headers.get(f"x-ratelimit-reset-{resource}")
        if remaining is not None and remaining <= 0 and reset is not None:
            delay = parse_duration(reset)
            # Azure reports remaining 0 with reset 0 when it means nothing; skip those.
            if delay:
                delays.append(delay)
    # Anthropic: RFC 3339 timestamps.
    for resource in ("requests", "tokens", "input-tokens", "output-tokens"):
        remaining = _int(headers.get(f"anthropic-ratelimit-{resource}-remaining"))
        reset = headers.get(f"anthropic-ratelimit-{resource}-reset")
        if remaining is not None and remaining <= 0 and reset is not None:
            delay = parse_timestamp(reset, wall_now)
            if delay:
                delays.append(delay)
    # Mistral: per-minute counters; the minute quota refills within 60 s at most.
    for resource in ("req", "tokens"):
        remaining = _int(headers.get(f"x-ratelimit-remaining-{resource}-minute"))
        if remaining is not None and remaining <= 0:
            reset = headers.get(f"x-ratelimit-reset-{resource}-minute") or headers.get(
                "x-ratelimit-reset"
            )
            delay = parse_duration(reset) if reset is not None else None
            delays.append(delay if delay else 60.0)
    return delays


def read_feedback(
    status: int, headers: Mapping[str, str], *, wall_now: float | None = None
) -> RateFeedback:
    """Everything the status and headers say about when to send the next request."""
    wall = time.time() if wall_now is None else wall_now
    lowered = {key.lower(): value for key, value in headers.items()}
    verdict = lowered.get("x-should-retry", "").strip().lower()
    should_retry = True if verdict == "true" else False if verdict == "false" else None

    delay, source = requested_delay(lowered, wall)
    if delay is not None:
        return RateFeedback(delay, should_retry, source)
    resets = _exhausted_resets(lowered, wall)
    if resets:
        return RateFeedback(max(resets), should_retry, "ratelimit-reset")
    return RateFeedback(None, should_retry, "")


def quota_exhausted_for(headers: Mapping[str, str], *, wall_now: float | None = None) -> float:
    """On a successful answer: how long a quota the headers report as used up stays empty.

    0 when no quota is exhausted (or the headers carry no reset time).
    """
    lowered = {key.lower(): value for key, value in headers.items() if "ratelimit" in key.lower()}
    if not lowered:
        return 0.0
    resets = _exhausted_resets(lowered, time.time() if wall_now is None else wall_now)
    return max(resets, default=0.0)

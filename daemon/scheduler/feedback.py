"""What a server's answer says about when to ask it again.

Folds every rate-limit signal we know into one "wait this many seconds" figure:

- ``retry-after-ms`` (OpenAI, Anthropic, Azure SDKs) before ``Retry-After`` (RFC 9110:
  delay seconds, a float in practice, or an HTTP-date);
- OpenAI ``x-ratelimit-{remaining,reset}-{requests,tokens}`` with Go-style durations
  (``12ms``, ``1s``, ``6m0s``);
- Anthropic ``anthropic-ratelimit-*-{remaining,reset}`` with RFC 3339 timestamps;
- Mistral ``x-ratelimit-remaining-{req,tokens}-minute`` (the quota refills within a minute)
  and relative-seconds resets;
- Gemini's ``RetryInfo.retryDelay`` (``"22s"``) in the 429 body;
- ``x-should-retry: false``.

Unlike LiteLLM we honour ``retry-after-ms`` and fractional values and do not cap the
delay at 60 s: a day-long quota reset means the backend is out for a day.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

#: Longest cooldown we accept from a header; beyond it the value is more likely garbage.
MAX_DELAY_S = 7 * 24 * 3600.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class RateFeedback:
    retry_after: float | None = None
    """Seconds until the server wants to hear from us again (None: it did not say)."""
    should_retry: bool | None = None
    """The server's ``x-should-retry`` verdict, when it gave one."""
    source: str = ""
    """Which header the delay came from, for logs and the tray."""


def _clamp(seconds: float) -> float | None:
    if math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_DELAY_S)


def parse_duration(value: str) -> float | None:
    """A Go duration (``6m0s``, ``12ms``, ``1.5s``) or bare seconds, in seconds."""
    text = value.strip().lower()
    if not text:
        return None
    try:
        return _clamp(float(text))
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        position = match.end()
    if position != len(text) or position == 0:
        return None
    return _clamp(total)


def parse_retry_after(value: str, wall_now: float) -> float | None:
    """``Retry-After``: seconds (float tolerated) or an HTTP-date, as seconds from now."""
    text = value.strip()
    try:
        return _clamp(float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return _clamp(max(0.0, when.timestamp() - wall_now))


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
    return _clamp(max(0.0, when.timestamp() - wall_now))


def retry_delay_from_body(body: str | bytes | Mapping[str, Any]) -> float | None:
    """Gemini's ``error.details[].retryDelay`` (``"22s"``) from a 429 body."""
    data: Any = body
    if isinstance(body, str | bytes):
        try:
            data = json.loads(body)
        except ValueError:
            return None
    error = data.get("error") if isinstance(data, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, Mapping) and isinstance(detail.get("retryDelay"), str):
            return parse_duration(detail["retryDelay"])
    return None


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

    if "retry-after-ms" in lowered:
        try:
            delay = _clamp(float(lowered["retry-after-ms"]) / 1000.0)
        except ValueError:
            delay = None
        if delay is not None:
            return RateFeedback(delay, should_retry, "retry-after-ms")
    if "retry-after" in lowered:
        delay = parse_retry_after(lowered["retry-after"], wall)
        if delay is not None:
            return RateFeedback(delay, should_retry, "retry-after")
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

"""When a server says to ask again: ``Retry-After`` and its relatives, in seconds from now.

One reading serves both the error a backend raises (``RateLimited.retry_after``) and the
scheduler's cooldown (``scheduler/feedback``), so the two never disagree about one answer.

- ``retry-after-ms`` (OpenAI, Anthropic, Azure SDKs) before ``Retry-After`` (RFC 9110:
  delay seconds, a float in practice, or an HTTP-date);
- Gemini's ``RetryInfo.retryDelay`` (``"22s"``) in a 429 body (also inside the JSON array
  a streaming endpoint answers with).

A negative, NaN or zone-less value says nothing; a delay is capped at ``MAX_DELAY_S``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "MAX_DELAY_S",
    "clamp_delay",
    "parse_duration",
    "parse_retry_after",
    "requested_delay",
    "retry_delay_from_body",
]

#: Longest cooldown we accept from a header; beyond it the value is more likely garbage.
MAX_DELAY_S = 7 * 24 * 3600.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def clamp_delay(seconds: float) -> float | None:
    """A usable delay: None for a negative or NaN one, at most ``MAX_DELAY_S``."""
    if math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_DELAY_S)


def parse_duration(value: str) -> float | None:
    """A Go duration (``6m0s``, ``12ms``, ``1.5s``) or bare seconds, in seconds."""
    text = value.strip().lower()
    if not text:
        return None
    try:
        return clamp_delay(float(text))
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
    return clamp_delay(total)


def parse_retry_after(value: str, wall_now: float) -> float | None:
    """``Retry-After``: seconds (float tolerated) or an HTTP-date, as seconds from now."""
    text = value.strip()
    try:
        return clamp_delay(float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return clamp_delay(max(0.0, when.timestamp() - wall_now))


def requested_delay(lowered: Mapping[str, str], wall_now: float) -> tuple[float | None, str]:
    """The wait the headers (names in lower case) ask for, and the header that asked."""
    if "retry-after-ms" in lowered:
        try:
            delay = clamp_delay(float(lowered["retry-after-ms"]) / 1000.0)
        except ValueError:
            delay = None
        if delay is not None:
            return delay, "retry-after-ms"
    if "retry-after" in lowered:
        delay = parse_retry_after(lowered["retry-after"], wall_now)
        if delay is not None:
            return delay, "retry-after"
    return None, ""


def retry_delay_from_body(body: str | bytes | Mapping[str, Any]) -> float | None:
    """Gemini's ``error.details[].retryDelay`` (``"22s"``) from a 429 body."""
    data: Any = body
    if isinstance(body, str | bytes):
        mentioned = "retryDelay" in body if isinstance(body, str) else b"retryDelay" in body
        if not mentioned:
            return None  # most error bodies: skip the JSON parse
        try:
            data = json.loads(body)
        except ValueError:
            return None
    if isinstance(data, list) and data:
        data = data[0]  # Gemini's streaming endpoints wrap the error in an array
    error = data.get("error") if isinstance(data, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, Mapping) and isinstance(detail.get("retryDelay"), str):
            return parse_duration(detail["retryDelay"])
    return None

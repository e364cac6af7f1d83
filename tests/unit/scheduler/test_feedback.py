"""Rate-limit headers and bodies as providers send them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from anyfill.daemon.backends.retry_times import (
    parse_duration,
    parse_retry_after,
    retry_delay_from_body,
)
from anyfill.daemon.scheduler.feedback import parse_timestamp, quota_exhausted_for, read_feedback

NOW = datetime(2026, 11, 30, 7, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("12ms", 0.012),
        ("9ms", 0.009),
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("1.5s", 1.5),
        ("250us", 0.00025),
        ("20", 20.0),
        ("0.5", 0.5),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5 minutes", "m5", "-3", "1x"])
def test_bad_durations_are_ignored(text: str) -> None:
    assert parse_duration(text) is None


def test_retry_after_seconds_float_and_http_date() -> None:
    assert parse_retry_after("7", NOW) == 7.0
    assert parse_retry_after("1.5", NOW) == 1.5
    later = datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=90)
    assert parse_retry_after(format_datetime(later, usegmt=True), NOW) == pytest.approx(90)
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW) == 0.0  # in the past
    assert parse_retry_after("tomorrow", NOW) is None


def test_rfc3339_timestamps() -> None:
    assert parse_timestamp("2026-11-30T07:00:42Z", NOW) == pytest.approx(42)
    assert parse_timestamp("2026-11-30T08:00:30+01:00", NOW) == pytest.approx(30)
    assert parse_timestamp("2026-11-30T07:00:42", NOW) is None  # no zone: unusable


def test_retry_after_ms_wins_over_retry_after() -> None:
    feedback = read_feedback(429, {"Retry-After": "2", "retry-after-ms": "1500"}, wall_now=NOW)
    assert feedback.retry_after == 1.5
    assert feedback.source == "retry-after-ms"


def test_http_date_retry_after_on_a_429() -> None:
    later = datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=30)
    feedback = read_feedback(
        429, {"Retry-After": format_datetime(later, usegmt=True)}, wall_now=NOW
    )
    assert feedback.retry_after == pytest.approx(30)


def test_openai_headers_without_retry_after_use_the_exhausted_reset() -> None:
    headers = {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "6m0s",
        "x-ratelimit-limit-tokens": "150000",
        "x-ratelimit-remaining-tokens": "149000",
        "x-ratelimit-reset-tokens": "12ms",
    }
    feedback = read_feedback(429, headers, wall_now=NOW)
    assert feedback.retry_after == 360.0
    assert feedback.source == "ratelimit-reset"


def test_anthropic_reset_timestamps() -> None:
    headers = {
        "anthropic-ratelimit-requests-remaining": "10",
        "anthropic-ratelimit-requests-reset": "2026-11-30T07:00:05Z",
        "anthropic-ratelimit-tokens-remaining": "0",
        "anthropic-ratelimit-tokens-reset": "2026-11-30T07:00:20Z",
    }
    assert read_feedback(429, headers, wall_now=NOW).retry_after == pytest.approx(20)


def test_mistral_minute_quota_used_up() -> None:
    headers = {"x-ratelimit-limit-req-minute": "60", "x-ratelimit-remaining-req-minute": "0"}
    assert read_feedback(429, headers, wall_now=NOW).retry_after == 60.0
    headers["x-ratelimit-reset"] = "17"
    assert read_feedback(429, headers, wall_now=NOW).retry_after == 17.0


def test_azure_zero_reset_means_nothing() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "0"}
    assert read_feedback(429, headers, wall_now=NOW).retry_after is None


def test_should_retry_header() -> None:
    assert read_feedback(500, {"x-should-retry": "false"}).should_retry is False
    assert read_feedback(500, {"X-Should-Retry": "true"}).should_retry is True
    assert read_feedback(500, {}).should_retry is None


def test_no_cap_at_sixty_seconds() -> None:
    assert read_feedback(429, {"retry-after": "3600"}).retry_after == 3600.0


def test_gemini_retry_info_in_the_body() -> None:
    body = (
        '{"error":{"code":429,"message":"Resource has been exhausted","status":'
        '"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},'
        '{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"22s"}]}}'
    )
    assert retry_delay_from_body(body) == 22.0
    assert retry_delay_from_body(b'{"error":{"code":429}}') is None
    assert retry_delay_from_body("not json") is None


def test_quota_used_up_on_a_successful_answer() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}
    assert quota_exhausted_for(headers) == 1.0
    assert quota_exhausted_for({"content-type": "text/event-stream"}) == 0.0
    assert quota_exhausted_for({"x-ratelimit-remaining-requests": "5"}) == 0.0

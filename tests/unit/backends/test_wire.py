"""Pure helpers of the backend layer: retry times, error texts, URLs, stop lists, trimming."""

from __future__ import annotations

import email.utils
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anyfill.config.model import BACKEND_TYPES
from anyfill.daemon.backends.common import join_url, limit_stops
from anyfill.daemon.backends.registry import BACKEND_CLASSES, backend_class
from anyfill.daemon.backends.wire import (
    error_code,
    error_for_status,
    error_message,
    retry_after_seconds,
)
from anyfill.daemon.engine.engine import trim_context
from anyfill.daemon.errors import (
    AuthError,
    BadRequest,
    ConfigError,
    ModelNotFound,
    RateLimited,
    ServerError,
    UnsupportedFeature,
)

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"Retry-After": "12"}, b"", 12.0),
        ({"retry-after": "0.5"}, b"", 0.5),
        ({"retry-after-ms": "250", "Retry-After": "9"}, b"", 0.25),
        ({"Retry-After": email.utils.formatdate(NOW + 40, usegmt=True)}, b"", 40.0),
        ({"Retry-After": email.utils.formatdate(NOW - 40, usegmt=True)}, b"", 0.0),
        ({"Retry-After": "soon"}, b"", None),
        ({}, b"", None),
        (
            {},
            json.dumps(
                {"error": {"details": [{"@type": "x.RetryInfo", "retryDelay": "22s"}]}}
            ).encode(),
            22.0,
        ),
        ({}, b'{"error": {"details": [{"retryDelay": "1.5s"}]}}', 1.5),
        ({}, b'[{"error": {"details": [{"retryDelay": "2m"}]}}]', 120.0),
        ({}, b"retryDelay but not json", None),
    ],
)
def test_retry_after(headers: dict[str, str], body: bytes, expected: float | None) -> None:
    assert retry_after_seconds(headers, body, now=NOW) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error":{"message":"bad key","type":"invalid_request_error"}}', "bad key"),
        (b'{"error":"model \'x\' not found"}', "model 'x' not found"),
        (
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "Overloaded",
        ),
        (b'{"message":"Unauthorized","request_id":"abc"}', "Unauthorized"),
        (b'{"detail":"Unauthorized"}', "Unauthorized"),
        (b'{"error":{"code":500,"type":"server_error"}}', "server_error"),
        (b"<html>\n  Bad   Gateway\n</html>", "<html> Bad Gateway </html>"),
        (b'[{"error":{"code":429,"message":"quota"}}]', "quota"),
    ],
)
def test_error_message_shapes(body: bytes, message: str) -> None:
    assert error_message(body) == message


def test_error_message_is_bounded() -> None:
    assert len(error_message(b"x" * 5000)) == 300


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, b"{}", AuthError),
        (403, b"{}", AuthError),
        (400, b'{"error":{"details":[{"reason":"API_KEY_INVALID"}]}}', AuthError),
        (429, b"{}", RateLimited),
        (404, b'{"error":"model \'m\' not found"}', ModelNotFound),
        (404, b"Not Found", ModelNotFound),
        (400, b'{"error":{"message":"The model `m` does not exist"}}', ModelNotFound),
        (400, b"{}", BadRequest),
        (422, b"{}", BadRequest),
        (501, b"{}", UnsupportedFeature),
        (500, b"{}", ServerError),
        (503, b"{}", ServerError),
        (529, b"{}", ServerError),
        (408, b"{}", ServerError),
    ],
)
def test_status_mapping(status: int, body: bytes, kind: type[Exception]) -> None:
    error = error_for_status("b", status, {}, body, url="http://h/v1/x", model="m")
    assert type(error) is kind
    assert "'b'" in str(error)
    assert error.status == status


def test_404_without_model_names_the_path() -> None:
    error = error_for_status("b", 404, {}, b"", url="http://h:1/infill")
    assert "has no /infill" in str(error)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (
            b'{"error":{"message":"m","type":"invalid_request_error","code":"invalid_api_key"}}',
            "invalid_api_key",
        ),  # OpenAI: code before type
        (
            b'{"error":{"message":"m","type":"invalid_request_error","code":null}}',
            "invalid_request_error",
        ),
        (
            b'{"type":"error","error":{"type":"not_found_error","message":"m"}}',
            "not_found_error",
        ),  # Anthropic
        (
            b'[{"error":{"code":400,"message":"m","status":"INVALID_ARGUMENT"}}]',
            "INVALID_ARGUMENT",
        ),  # Gemini, streamed
        (
            b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}',
            "unavailable_error",
        ),  # llama.cpp
        (
            b'{"object":"error","message":"m","type":"BadRequestError","code":400}',
            "BadRequestError",
        ),  # vLLM
        (b'{"error":"model not found"}', ""),  # Ollama: free text only
        (b'{"error":{"type":"the user wrote this sentence"}}', ""),  # not an identifier
        (b"plain text", ""),
    ],
)
def test_error_code_reads_only_identifiers(body: bytes, code: str) -> None:
    assert error_code(body) == code


def test_an_error_body_is_shown_only_as_its_length() -> None:
    body = b'{"error":{"message":"PRIVATE words here","type":"invalid_request_error"}}'
    error = error_for_status("b", 400, {}, body, url="http://h/v1/x", model="m")
    text = str(error)
    assert "backend 'b' rejected the request" in text
    assert "error code: 'invalid_request_error'" in text
    assert "PRIVATE" not in text
    assert "its message, 18 characters, is hidden" in text
    assert "privacy.log_text = true" in text
    assert error.server_message == "PRIVATE words here"  # for code, never for display


def test_an_identifier_that_is_a_word_of_the_request_is_hidden_too() -> None:
    body = b'{"error":{"message":"x","type":"hunter2_secret"}}'
    error = error_for_status(
        "b", 400, {}, body, url="http://h/v1/x", sent=["my password is hunter2_secret"]
    )
    assert "hunter2" not in str(error)


def test_llamacpp_loading_is_said_in_our_words() -> None:
    body = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
    error = error_for_status("b", 503, {}, body, url="http://h/health")
    assert type(error) is ServerError
    assert "backend 'b' is still loading its model" in str(error)


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://h:8000", "http://h:8000/v1/completions"),
        ("http://h:8000/v1", "http://h:8000/v1/completions"),
        ("https://api.deepseek.com/beta", "https://api.deepseek.com/beta/completions"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1/completions"),
        ("https://x/v1beta", "https://x/v1beta/completions"),
        ("http://h/proxy", "http://h/proxy/v1/completions"),
        ("http://v1host:8000", "http://v1host:8000/v1/completions"),
        ("http://h/v1/", "http://h/v1/completions"),
    ],
)
def test_join_url(base: str, expected: str) -> None:
    assert join_url(base, "/v1", "/completions") == expected


def test_limit_stops_keeps_order_drops_repeats_and_empties() -> None:
    assert limit_stops(["\n", "a", "", "a", "b", "c"], 3) == ["\n", "a", "b"]
    assert limit_stops(["a", "a"], None) == ["a"]


def test_registry_covers_every_config_type() -> None:
    assert set(BACKEND_CLASSES) == set(BACKEND_TYPES)
    with pytest.raises(ConfigError, match="known types: llamacpp"):
        backend_class("gpt")


@given(
    prefix=st.text(alphabet="ab\n", max_size=300),
    suffix=st.text(alphabet="cd\n", max_size=300),
    max_prefix=st.integers(1, 120),
    max_suffix=st.integers(0, 120),
)
def test_trim_context_keeps_the_text_next_to_the_caret(
    prefix: str, suffix: str, max_prefix: int, max_suffix: int
) -> None:
    kept_prefix, kept_suffix = trim_context(prefix, suffix, max_prefix, max_suffix)
    assert prefix.endswith(kept_prefix)
    assert suffix.startswith(kept_suffix)
    assert len(kept_prefix) <= max_prefix
    assert len(kept_suffix) <= max_suffix
    if len(prefix) <= max_prefix:
        assert kept_prefix == prefix
    if len(suffix) <= max_suffix:
        assert kept_suffix == suffix
    if len(prefix) > max_prefix and kept_prefix:
        # Either the cut fell at a line start, or no newline was near enough to snap to.
        cut_at = len(prefix) - len(kept_prefix)
        assert prefix[cut_at - 1] == "\n" or len(kept_prefix) == max_prefix


def test_refused_connection_reported_as_a_timeout_is_still_nothing_listens() -> None:
    import httpx

    from anyfill.daemon.backends.wire import transport_error
    from anyfill.daemon.errors import BackendTimeout, BackendUnavailable

    try:
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except ConnectionRefusedError as refused:
            raise httpx.ConnectTimeout("Cannot connect to host") from refused
    except httpx.ConnectTimeout as exc:
        mapped = transport_error("b", "http://127.0.0.1:9/x", exc)
    assert isinstance(mapped, BackendUnavailable)
    assert "nothing listens on http://127.0.0.1:9" in str(mapped)
    slow = transport_error("b", "http://10.0.0.1:9", httpx.ConnectTimeout("timed out"))
    assert isinstance(slow, BackendTimeout)
    assert "raise timeouts.connect_s" in str(slow)


@pytest.mark.parametrize(
    ("url", "endpoint", "native"),
    [
        ("https://api.deepseek.com", "https://api.deepseek.com/beta/completions", True),
        ("https://api.deepseek.com/beta", "https://api.deepseek.com/beta/completions", True),
        ("https://api.openai.com", "https://api.openai.com/v1/completions", True),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/completions", False),
        ("https://api.together.xyz/v1", "https://api.together.xyz/v1/completions", False),
    ],
)
async def test_completions_endpoint_and_native_suffix_by_host(
    url: str, endpoint: str, native: bool
) -> None:
    from anyfill.config.model import BackendConfig
    from anyfill.daemon.backends.http import make_client
    from anyfill.daemon.backends.openai_completions import OpenAICompletionsBackend

    config = BackendConfig(name="c", type="openai-completions", url=url, model="m")
    async with make_client(config) as client:
        backend = OpenAICompletionsBackend(config, client)
        assert backend.endpoint() == endpoint
        assert backend.native_suffix() is native
        assert backend.max_stop() == (4 if "openai" in url else 16)

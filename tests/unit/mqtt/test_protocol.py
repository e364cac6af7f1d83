"""Request payloads are checked whole; replies and errors survive the trip to a desktop."""

from __future__ import annotations

import json

import pytest

from anyfill.daemon.backends.base import Plan
from anyfill.daemon.errors import (
    AuthError,
    BackendTimeout,
    RateLimited,
    RequestDropped,
    ServerError,
)
from anyfill.daemon.mqtt.messages import Chunk, PlanInfo, read_reply
from anyfill.daemon.mqtt.protocol import (
    MAX_PAYLOAD,
    NodeRequest,
    PayloadError,
    PoolRequest,
    error_from_json,
    error_json,
    parse,
)


def test_a_full_node_request_parses() -> None:
    body = {
        "id": "r1",
        "prefix": "a",
        "suffix": "b",
        "backends": ["x"],
        "options": {"max_tokens": 9, "single_line": True, "priority": "prefetch"},
        "target": "editor:1",
    }
    request = parse(NodeRequest, json.dumps(body).encode())
    assert request.options.max_tokens == 9
    assert request.options.priority == "prefetch"
    assert request.backends == ["x"]
    assert request.insert is False


@pytest.mark.parametrize(
    ("payload", "says", "request_id"),
    [
        (b"\xff\xfe", "not JSON", None),
        (b"[1, 2]", "JSON object", None),
        (b'{"id": "a", "prefix": 1}', "prefix", "a"),
        (b'{"id": "a", "prefix": "x", "extra_field": 1}', "extra_field", "a"),
        (b'{"id": 7, "prefix": "x"}', "id", None),
        (b'{"prefix": "x", "options": {"max_tokens": 0}}', "max_tokens", None),
        (b'{"prefix": "x", "options": {"priority": "urgent"}}', "priority", None),
        (b'{"prefix": "x", "insert": "yes"}', "insert", None),
    ],
)
def test_a_bad_payload_says_what_is_wrong(
    payload: bytes, says: str, request_id: str | None
) -> None:
    with pytest.raises(PayloadError) as caught:
        parse(NodeRequest, payload)
    assert says in str(caught.value)
    assert caught.value.request_id == request_id


def test_an_oversized_payload_is_refused_before_it_is_read() -> None:
    payload = b'{"prefix": "' + b"x" * MAX_PAYLOAD + b'"}'
    with pytest.raises(PayloadError, match="over the"):
        parse(NodeRequest, payload)


def test_a_pool_request_keeps_extra_files_as_pairs() -> None:
    body = {"id": "p", "prefix": "a", "suffix": "b", "extra": [["f.py", "x = 1"]]}
    request = parse(PoolRequest, json.dumps(body).encode())
    assert request.extra == [("f.py", "x = 1")]


def test_a_plan_survives_the_trip() -> None:
    plan = Plan("template", "starcoder", ("<eot>",), "why")
    chunk = Chunk(id="p", text="x", plan=PlanInfo.of(plan))
    back = read_reply(chunk.to_bytes())
    assert isinstance(back, Chunk)
    assert back.plan is not None
    assert back.plan.plan() == plan
    with pytest.raises(PayloadError, match="malformed reply"):
        read_reply(b'{"type": "chunk", "text": "x", "plan": {"mode": "psychic"}}')


@pytest.mark.parametrize(
    ("error", "cls", "retryable"),
    [
        (RateLimited("gpu", "slow down", retry_after=2.5), RateLimited, True),
        (AuthError("gpu", "bad key", status=401), AuthError, False),
        (BackendTimeout("gpu", "late"), BackendTimeout, True),
        (RequestDropped("r", "past its deadline"), BackendTimeout, True),
        (RuntimeError("bug"), ServerError, True),
    ],
)
def test_a_worker_error_becomes_the_same_kind_of_error_on_the_desktop(
    error: Exception, cls: type[Exception], retryable: bool
) -> None:
    sent = error_json(error, with_text=False, for_worker_link=True)
    back = error_from_json("pool", json.loads(json.dumps(sent)))
    assert type(back) is cls
    assert back.retryable is retryable
    assert back.backend == "pool"
    if isinstance(error, RateLimited):
        assert isinstance(back, RateLimited)
        assert back.retry_after == 2.5
    if isinstance(error, AuthError):
        assert back.status == 401


def test_the_documented_shell_signature_is_the_one_the_node_checks() -> None:
    """docs/mqtt.md signs an insert request with printf and openssl."""
    import shutil
    import subprocess

    from anyfill.daemon.mqtt.protocol import sign_insert

    if shutil.which("openssl") is None:
        pytest.skip("needs openssl (.ci/apt-packages.txt)")
    script = (
        "KEY='the shared insert key'; at=1764660000; id=\"ins-$at\"; "
        'printf \'anyfill-insert\\n%s\\n%s\\n%s\' anyfill/alice-laptop "$id" "$at" '
        "| openssl dgst -sha256 -hmac \"$KEY\" -r | cut -d' ' -f1"
    )
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    expected = sign_insert(
        "the shared insert key", "anyfill/alice-laptop", "ins-1764660000", 1764660000
    )
    assert shell.stdout.strip() == expected


@pytest.mark.parametrize(
    "payload",
    [b"[" * 100_000, b'{"id": "a", "x": ' + b"{" * 5000, b'"\\ud800"', b"\xff"],
    ids=["deep-array", "deep-object", "lone-surrogate", "not-utf8"],
)
def test_network_json_is_read_with_bounds_and_only_payload_errors(payload: bytes) -> None:
    from anyfill.daemon.mqtt.protocol import CancelRequest, load_json

    with pytest.raises(PayloadError):
        load_json(payload)
    with pytest.raises(PayloadError):
        parse(CancelRequest, payload)


@pytest.mark.parametrize(
    ("topic", "ok"),
    [
        ("me/replies", True),
        ("a\u0000b", False),
        ("a/#", False),
        ("a/+/b", False),
        ("$SYS/x", False),
        ("a\u001bb", False),
        ("", False),
        ("x" * 2000, False),
    ],
)
def test_a_reply_topic_is_checked_before_anything_is_published_there(topic: str, ok: bool) -> None:
    from anyfill.daemon.mqtt.protocol import topic_problem

    assert (topic_problem(topic) is None) is ok


@pytest.mark.parametrize("value", [10**400, float("inf"), -1, 1e9, True, "5"])
def test_an_unbelievable_retry_after_from_a_worker_is_ignored(value: object) -> None:
    back = error_from_json("pool", {"kind": "rate_limited", "message": "m", "retry_after": value})
    assert isinstance(back, RateLimited)
    assert back.retry_after is None

"""Behaviour every backend type shares, checked against its own loopback protocol server:
streaming, errors mapped with a message naming the backend and the fix, retry times,
broken streams, keep-alive reuse and cancellation that closes the connection."""

from __future__ import annotations

import asyncio
import email.utils
import time

import pytest

from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.errors import (
    AuthError,
    BackendTimeout,
    BackendUnavailable,
    BadRequest,
    ModelNotFound,
    ProtocolError,
    RateLimited,
    ServerError,
)
from tests.integration.backends.helpers import (
    CASE_IDS,
    CASES,
    SEED,
    Case,
    Recorder,
    assert_hidden,
    backend_for,
    collect,
    text_opted_in,
)
from tests.servers import SEED_ANSWER, Reply
from tests.servers.fixtures import StartServer
from tests.servers.script import split_text

pytestmark = pytest.mark.parametrize("case", CASES, ids=CASE_IDS)


async def test_streams_the_answer_in_chunks(case: Case, loopback: StartServer) -> None:
    # Paced like a model's tokens: what arrives in one read is handed on as one piece.
    reply = Reply(headers={"x-ratelimit-remaining-requests": "59"}, chunk_delay_s=0.01)
    srv = await loopback(case.make(reply))
    recorder = Recorder()
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        chunks = await collect(be, SEED, recorder)
    assert "".join(chunks) == SEED_ANSWER
    assert len(chunks) > 1
    assert recorder.statuses[-1] == 200
    assert recorder.headers[-1]["x-ratelimit-remaining-requests"] == "59"
    assert len(recorder.plans) == 1
    assert recorder.usages
    assert recorder.usages[-1].completion_tokens == len(split_text(SEED_ANSWER))


async def test_keepalive_lines_are_ignored(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(keepalives=3)))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        assert "".join(await collect(be)) == SEED_ANSWER


async def test_connection_is_reused_between_requests(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make())
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        for _ in range(3):
            assert "".join(await collect(be)) == SEED_ANSWER
    assert srv.connections == 1


async def test_refused_key_names_backend_and_fix(case: Case, loopback: StartServer) -> None:
    if case.api_key is None:
        pytest.skip("local server without a key")
    srv = await loopback(case.make())
    async with backend_for(case.type_name, srv.url, api_key="wrong", **case.config) as be:
        with pytest.raises(AuthError) as caught:
            await collect(be)
    message = str(caught.value)
    assert f"the API key for backend 'test-{case.type_name}' was refused" in message
    assert f"anyfill config set-key test-{case.type_name}" in message
    assert "wrong" not in message


async def test_403_is_an_auth_error(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(error="forbidden")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(AuthError, match="was refused"):
            await collect(be)


async def test_429_carries_the_servers_retry_time(case: Case, loopback: StartServer) -> None:
    reply = (
        Reply(error="rate_limit", retry_delay="22s")
        if case.type_name == "gemini"
        else Reply(error="rate_limit", retry_after="7")
    )
    srv = await loopback(case.make(reply))
    recorder = Recorder()
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(RateLimited) as caught:
            await collect(be, SEED, recorder)
    assert recorder.statuses[-1] == 429  # the scheduler sees the status and headers too
    expected = 22.0 if case.type_name == "gemini" else 7.0
    assert caught.value.retry_after == expected
    assert caught.value.retryable
    assert f"retry in {expected:g} s" in str(caught.value)


async def test_429_with_an_http_date(case: Case, loopback: StartServer) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    srv = await loopback(case.make(Reply(error="rate_limit", retry_after=when)))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(RateLimited) as caught:
            await collect(be)
    assert caught.value.retry_after is not None
    assert 27 <= caught.value.retry_after <= 31


async def test_429_with_retry_after_ms(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(error="rate_limit", retry_after_ms="1500")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(RateLimited) as caught:
            await collect(be)
    assert caught.value.retry_after == 1.5


async def test_5xx_is_a_retryable_server_error(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(error="server")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(ServerError, match=f"backend 'test-{case.type_name}' failed") as caught:
            await collect(be)
    assert caught.value.retryable
    assert caught.value.status == 500


async def test_400_is_a_bad_request(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(error="bad_request", message="max_tokens is too big")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(BadRequest, match="rejected the request") as caught:
            await collect(be)
    assert_hidden(str(caught.value), "max_tokens is too big")
    assert not caught.value.retryable
    srv = await loopback(case.make(Reply(error="bad_request", message="max_tokens is too big")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with text_opted_in(), pytest.raises(BadRequest, match="max_tokens is too big"):
            await collect(be)


async def test_unknown_model(case: Case, loopback: StartServer) -> None:
    if case.type_name == "llamacpp":
        pytest.skip("llama-server serves one model and has no model names")
    config = {**case.config, "model": "no-such-model"}
    if case.type_name == "openai-completions":
        config["template"] = "qwen"  # the name tells no template
    srv = await loopback(case.make(Reply(error="not_found")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **config) as be:
        with pytest.raises(ModelNotFound) as caught:
            await collect(be)
    assert f"model 'no-such-model' not found on backend 'test-{case.type_name}'" in str(
        caught.value
    )


async def test_nothing_listening(case: Case, refused_url: str) -> None:
    async with backend_for(case.type_name, refused_url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(BackendUnavailable) as caught:
            await collect(be)
    assert f"nothing listens on {refused_url}" in str(caught.value)
    assert f"test-{case.type_name}" in str(caught.value)


async def test_connection_dropped_mid_stream(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(text="a b c d e f g", drop_after=2)))
    got: list[str] = []
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:

        async def read() -> None:
            async with closing_stream(be.stream(SEED)) as chunks:
                async for chunk in chunks:
                    got.append(chunk)

        with pytest.raises(ProtocolError, match="dropped the connection"):
            await read()
    assert "".join(got) == "a b"


async def test_garbage_line_is_a_protocol_error(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(garbage_after=1)))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(ProtocolError, match="is not JSON"):
            await collect(be)


async def test_error_reported_inside_the_stream(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(midstream_error="the runner crashed")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(ServerError, match=f"backend 'test-{case.type_name}' failed") as caught:
            await collect(be)
    assert_hidden(str(caught.value), "the runner crashed")
    srv = await loopback(case.make(Reply(midstream_error="the runner crashed")))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        with text_opted_in(), pytest.raises(ServerError, match="the runner crashed"):
            await collect(be)


async def test_silence_is_a_timeout(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(delay_s=3)))
    timeouts = {"first_token_s": 0.3}
    async with backend_for(
        case.type_name, srv.url, api_key=case.api_key, timeouts=timeouts, **case.config
    ) as be:
        with pytest.raises(BackendTimeout, match="sent nothing for too long"):
            await collect(be)


async def test_total_time_limit(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(text="a b c d e f g h i j", chunk_delay_s=0.1)))
    timeouts = {"total_s": 0.35}
    async with backend_for(
        case.type_name, srv.url, api_key=case.api_key, timeouts=timeouts, **case.config
    ) as be:
        with pytest.raises(BackendTimeout, match=r"timeouts.total_s"):
            await collect(be)


async def test_stopping_early_closes_the_connection(case: Case, loopback: StartServer) -> None:
    srv = await loopback(case.make(Reply(text="tok " * 200, chunk_delay_s=0.01)))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        async with closing_stream(be.stream(SEED)) as chunks:
            async for _chunk in chunks:
                break
        gone = await srv.wait_disconnect(within=2)
    request = srv.requests[gone.request_index]
    assert not request.finished
    assert gone.chunks_sent < 50


async def test_cancelling_the_task_before_headers_closes_the_connection(
    case: Case, loopback: StartServer
) -> None:
    srv = await loopback(case.make(default=Reply(delay_s=10)))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        task = asyncio.create_task(collect(be))
        await srv.wait_for(lambda: any(r.path not in ("/api/show", "/props") for r in srv.requests))
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gone = await srv.wait_disconnect(within=2)
    assert gone.at - started < 1.0
    assert gone.chunks_sent == 0


async def test_health_check(case: Case, loopback: StartServer, refused_url: str) -> None:
    srv = await loopback(case.make())
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        await be.health()
    assert srv.requests[-1].method in ("GET", "POST")
    async with backend_for(case.type_name, refused_url, api_key=case.api_key, **case.config) as be:
        with pytest.raises(BackendUnavailable):
            await be.health()
    if case.api_key is not None:
        async with backend_for(case.type_name, srv.url, api_key="wrong", **case.config) as be:
            with pytest.raises(AuthError):
                await be.health()


async def test_total_time_limit_holds_during_keepalives(case: Case, loopback: StartServer) -> None:
    """A server that only sends keep-alives (DeepSeek while queued) cannot hold us forever."""
    srv = await loopback(case.make(Reply(keepalives=100, chunk_delay_s=0.03)))
    timeouts = {"total_s": 0.4}
    async with backend_for(
        case.type_name, srv.url, api_key=case.api_key, timeouts=timeouts, **case.config
    ) as be:
        started = time.monotonic()
        with pytest.raises(BackendTimeout, match=r"timeouts.total_s"):
            await collect(be)
    assert time.monotonic() - started < 2.0


async def test_server_closing_idle_connections_is_not_an_error(
    case: Case, loopback: StartServer
) -> None:
    """llama-server closes the socket after a streamed answer without saying so; the next
    request must not fail on the dead pooled connection."""
    srv = await loopback(case.make(default=Reply(close_after=True)))
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        for _ in range(3):
            assert "".join(await collect(be)) == SEED_ANSWER
    assert len([r for r in srv.requests if r.finished]) >= 3


def _found(body: object, key: str) -> list[object]:
    """Every value under ``key`` anywhere in a JSON body (ollama nests its options,
    Gemini its generationConfig)."""
    if isinstance(body, dict):
        here = [body[key]] if key in body else []
        return here + [v for value in body.values() for v in _found(value, key)]
    if isinstance(body, list):
        return [v for value in body for v in _found(value, key)]
    return []


SEED_KEYS = {"mistral-fim": "random_seed", "anthropic": ""}


async def test_another_sample_is_asked_with_its_seed_and_a_higher_temperature(
    case: Case, loopback: StartServer
) -> None:
    """Alt+] in the preview asks for another sample: the wire request differs from the
    usual one, or the backend would answer the same again."""
    from dataclasses import replace

    from anyfill.daemon.backends.common import ALTERNATIVE_TEMPERATURE

    srv = await loopback(case.make())
    async with backend_for(case.type_name, srv.url, api_key=case.api_key, **case.config) as be:
        await collect(be, SEED)
        await collect(be, replace(SEED, sample=3))
    usual, sample = (request.json() for request in srv.requests[-2:])
    seed_key = SEED_KEYS.get(case.type_name, "seed")
    assert _found(usual, "temperature") == [be.config.temperature]
    assert _found(sample, "temperature") == [ALTERNATIVE_TEMPERATURE]
    if seed_key:
        assert _found(usual, seed_key) == []
        assert _found(sample, seed_key) == [3]

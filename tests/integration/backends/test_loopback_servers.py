"""The loopback servers themselves: framing, recording and disconnect detection.

These talk raw httpx so the servers are checked independently of anyfill's backends.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.servers import (
    Anthropic,
    Gemini,
    LlamaCpp,
    LoopbackServer,
    MistralFim,
    Ollama,
    OpenAI,
    Reply,
)
from tests.servers.fixtures import StartServer


async def test_records_request_and_answers_json(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            srv.url + "/completion", json={"prompt": "x", "n_predict": 4}, headers={"X-T": "1"}
        )
    assert answer.status_code == 200
    assert answer.json()["content"] == 'lo World")'
    assert answer.json()["stop"] is True
    (request,) = srv.requests
    assert (request.method, request.path) == ("POST", "/completion")
    assert request.json() == {"prompt": "x", "n_predict": 4}
    assert request.headers["x-t"] == "1"
    assert request.finished


async def test_sse_stream_is_chunked_and_reuses_the_connection(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    async with httpx.AsyncClient() as client:
        for _ in range(2):
            async with client.stream(
                "POST",
                srv.url + "/infill",
                json={"input_prefix": "a", "input_suffix": "b", "stream": True},
            ) as answer:
                assert answer.headers["transfer-encoding"] == "chunked"
                lines = [line async for line in answer.aiter_lines()]
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert "".join(e["content"] for e in events) == 'lo World")'
    assert events[-1]["stop"] is True
    assert not any(e["stop"] for e in events[:-1])
    assert srv.connections == 1
    assert [r.connection for r in srv.requests] == [1, 1]


async def test_drop_after_aborts_mid_body(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(Reply(text="a b c d e f", drop_after=2)))

    async def read_all() -> None:
        async with (
            httpx.AsyncClient() as client,
            client.stream(
                "POST", srv.url + "/v1/completions", json={"prompt": "p", "stream": True}
            ) as answer,
        ):
            async for _ in answer.aiter_lines():
                pass

    with pytest.raises(httpx.RemoteProtocolError):
        await read_all()
    assert srv.requests[0].chunks_sent == 2
    assert not srv.requests[0].finished


async def test_client_leaving_is_recorded_as_disconnect(loopback: StartServer) -> None:
    srv = await loopback(Ollama(default=Reply(text="x " * 50, chunk_delay_s=0.02)))
    async with (
        httpx.AsyncClient() as client,
        client.stream(
            "POST", srv.url + "/api/generate", json={"model": "starcoder2:3b", "prompt": "p"}
        ) as answer,
    ):
        async for line in answer.aiter_lines():
            assert json.loads(line)["done"] is False
            break
    gone = await srv.wait_disconnect()
    assert gone.path == "/api/generate"
    assert gone.chunks_sent < 10
    assert srv.requests[0].disconnected_at is not None


async def test_disconnect_during_prefill_before_headers(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(Reply(delay_s=5)))
    async with httpx.AsyncClient() as client:
        task = asyncio.create_task(
            client.post(srv.url + "/v1/chat/completions", json={"messages": []})
        )
        await srv.wait_for(lambda: len(srv.requests) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    gone = await srv.wait_disconnect(within=2)
    assert gone.chunks_sent == 0


async def test_rate_limit_headers_and_bodies(loopback: StartServer) -> None:
    srv = await loopback(
        Anthropic(Reply(error="rate_limit", retry_after="17")),
        Gemini(Reply(error="rate_limit", retry_delay="22s")),
    )
    async with httpx.AsyncClient() as client:
        first = await client.post(
            srv.url + "/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            headers={"anthropic-version": "2023-06-01"},
        )
        second = await client.post(
            srv.url + "/v1beta/models/gemini-2.0-flash:generateContent", json={}
        )
    assert first.status_code == 429
    assert first.headers["retry-after"] == "17"
    assert first.json()["error"]["type"] == "rate_limit_error"
    assert second.status_code == 429
    assert second.json()["error"]["details"][1]["retryDelay"] == "22s"


async def test_mistral_rejects_a_wrong_key(loopback: StartServer) -> None:
    srv = await loopback(MistralFim(api_key="right"))
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            srv.url + "/v1/fim/completions",
            json={"model": "codestral-latest", "prompt": "a"},
            headers={"Authorization": "Bearer wrong"},
        )
    assert answer.status_code == 401
    assert answer.json()["message"] == "Unauthorized"


def test_in_thread_mode_serves_synchronous_clients() -> None:
    with LoopbackServer.in_thread(
        OpenAI(default=Reply(text="a b c d e f g h", chunk_delay_s=0.05))
    ) as srv:
        with httpx.Client() as client:
            answer = client.post(srv.url + "/v1/completions", json={"prompt": ["a", "b"]})
            with client.stream(
                "POST", srv.url + "/v1/completions", json={"prompt": "a", "stream": True}
            ) as streamed:
                for _ in streamed.iter_lines():
                    break
        gone = srv.wait_disconnect_sync()
    assert [c["index"] for c in answer.json()["choices"]] == [0, 1]
    assert gone.request_index == 1


async def raw_body(
    srv: LoopbackServer, path: str, body: dict[str, object], **headers: str
) -> bytes:
    async with httpx.AsyncClient() as client:
        answer = await client.post(srv.url + path, json=body, headers=headers)
    return answer.content


async def test_anthropic_named_events_in_documented_order(loopback: StartServer) -> None:
    srv = await loopback(Anthropic(Reply(text="ab", keepalives=1)))
    body = await raw_body(
        srv,
        "/v1/messages",
        {
            "model": "m",
            "max_tokens": 4,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        },
        **{"anthropic-version": "2023-06-01"},
    )
    events = [line[7:] for line in body.decode().split("\n") if line.startswith("event: ")]
    assert events == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_gemini_sse_uses_crlf_and_ends_without_a_marker(loopback: StartServer) -> None:
    srv = await loopback(Gemini())
    body = await raw_body(srv, "/v1beta/models/g:streamGenerateContent?alt=sse", {})
    assert body.startswith(b"data: {")
    assert body.endswith(b"}\r\n\r\n")
    last = json.loads(body.split(b"\r\n\r\n")[-2][6:])
    assert last["candidates"][0]["finishReason"] == "STOP"


async def test_openai_stream_ends_with_done_and_ollama_with_done_true(
    loopback: StartServer,
) -> None:
    srv = await loopback(OpenAI(), Ollama())
    sse_body = await raw_body(srv, "/v1/completions", {"prompt": "p", "stream": True})
    assert sse_body.endswith(b"data: [DONE]\n\n")
    ndjson = await raw_body(srv, "/api/generate", {"model": "starcoder2:3b", "prompt": "p"})
    lines = [json.loads(line) for line in ndjson.splitlines()]
    assert lines[-1]["done"] is True
    assert lines[-1]["done_reason"] == "stop"
    assert "".join(line["response"] for line in lines) == 'lo World")'

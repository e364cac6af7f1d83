"""Server feedback, fallback, hedging and batching over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from anyfill.config.model import Limits, RoutingConfig, Timeouts
from anyfill.daemon.completion import Attempt
from anyfill.daemon.errors import AuthError, RateLimited, RequestDropped
from tests.integration.scheduler.helpers import (
    collect,
    openai_config,
    prompt,
    request,
    scheduler_for,
    text_of,
)
from tests.servers.fixtures import StartServer
from tests.servers.http import RecordedRequest, Response
from tests.servers.openai import OpenAI
from tests.servers.script import Reply


async def test_retry_after_is_honoured_then_the_backend_is_used_again(
    loopback: StartServer,
) -> None:
    first = await loopback(
        OpenAI(Reply(error="rate_limit", retry_after_ms="1500"), default=Reply(text="from first"))
    )
    second = await loopback(OpenAI(default=Reply(text="from second")))
    configs = [openai_config("first", first.url), openai_config("second", second.url)]
    async with scheduler_for(configs) as scheduler:
        events = await collect(scheduler, request("r1"), prompt("a = "))
        assert [e.backend for e in events if isinstance(e, Attempt)] == ["first", "second"]
        assert text_of(events) == "from second"
        assert 0 < scheduler.cooling("first") <= 1.5
        events = await collect(scheduler, request("r2"), prompt("b = "))
        assert text_of(events) == "from second"
        assert len(first.requests) == 1, "nothing may be sent while the server asked us to wait"
        await asyncio.sleep(scheduler.cooling("first") + 0.05)
        events = await collect(scheduler, request("r3"), prompt("c = "))
        assert text_of(events) == "from first"
    assert len(first.requests) == 2


async def test_only_backend_rate_limited_fails_fast_with_the_wait(loopback: StartServer) -> None:
    server = await loopback(OpenAI(Reply(error="rate_limit", retry_after="30")))
    async with scheduler_for([openai_config("only", server.url)]) as scheduler:
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r1"))
        with pytest.raises(RateLimited, match=r"rate-limited for another (29|30)\.\d s"):
            await collect(scheduler, request("r2"), prompt("other"))
    assert len(server.requests) == 1


async def test_refused_key_stops_without_fallback(loopback: StartServer) -> None:
    first = await loopback(OpenAI(api_key="right-key"))
    second = await loopback(OpenAI())
    configs = [openai_config("first", first.url), openai_config("second", second.url)]
    async with scheduler_for(configs) as scheduler:
        with pytest.raises(AuthError):
            await collect(scheduler, request("r1"))
    assert second.requests == []


async def test_dropped_connection_and_refused_port_fall_back(
    loopback: StartServer, refused_url: str
) -> None:
    dropping = await loopback(OpenAI(Reply(text="one two three four", drop_after=1)))
    healthy = await loopback(OpenAI(default=Reply(text="safe")))
    configs = [
        openai_config("nothing", refused_url),
        openai_config("dropping", dropping.url),
        openai_config("healthy", healthy.url),
    ]
    async with scheduler_for(configs) as scheduler:
        events = await collect(scheduler, request("r1"))
    attempts = [i for i, e in enumerate(events) if isinstance(e, Attempt)]
    assert [events[i].backend for i in attempts] == ["nothing", "dropping", "healthy"]  # type: ignore[attr-defined]
    assert text_of(events[attempts[-1] :]) == "safe"
    assert scheduler.cooling("nothing") > 0
    assert scheduler.cooling("dropping") > 0


async def test_hedging_starts_the_second_and_disconnects_the_loser(loopback: StartServer) -> None:
    slow = await loopback(OpenAI(default=Reply(text="slow", delay_s=3)))
    fast = await loopback(OpenAI(default=Reply(text="fast")))
    configs = [openai_config("slow", slow.url), openai_config("fast", fast.url)]
    routing = RoutingConfig(default=["slow", "fast"], hedge_after_ms=150)
    async with scheduler_for(configs, routing) as scheduler:
        events = await collect(scheduler, request("r1"))
        gone = await slow.wait_disconnect(1, within=2)
    assert [e.backend for e in events if isinstance(e, Attempt)] == ["fast"]
    assert text_of(events) == "fast"
    assert gone.chunks_sent == 0
    assert not slow.requests[0].finished


async def test_first_token_timeout_falls_back(loopback: StartServer) -> None:
    stuck = await loopback(OpenAI(default=Reply(text="late", delay_s=5)))
    spare = await loopback(OpenAI(default=Reply(text="spare")))
    configs = [
        openai_config("stuck", stuck.url, timeouts=Timeouts(first_token_s=0.3)),
        openai_config("spare", spare.url),
    ]
    async with scheduler_for(configs) as scheduler:
        events = await collect(scheduler, request("r1"))
        await stuck.wait_disconnect(1, within=2)
    assert text_of(events) == "spare"


def _fim_prefix(templated: str) -> str:
    """The document prefix inside a Qwen FIM prompt."""
    return templated.split("<|fim_prefix|>", 1)[1].split("<|fim_suffix|>", 1)[0]


class EchoBatch:
    """OpenAI ``/v1/completions`` answering a prompt list with one answer per prompt,
    after a per-request cost, counting requests."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def handles(self, method: str, path: str) -> bool:
        return path == "/v1/completions"

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        body = request.json()
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        self.sizes.append(len(prompts))
        await response.sleep(0.05)
        choices = [
            {"text": "#" + _fim_prefix(p), "index": i, "finish_reason": "stop"}
            for i, p in enumerate(prompts)
        ]
        usage = {"prompt_tokens": 10 * len(prompts), "completion_tokens": 2 * len(prompts)}
        await response.json(200, {"object": "text_completion", "choices": choices, "usage": usage})


async def test_batch_requests_share_one_http_request_and_fan_out(loopback: StartServer) -> None:
    echo = EchoBatch()
    server = await loopback(echo)
    config = openai_config("vllm", server.url, limits=Limits(max_concurrent=4))
    async with scheduler_for([config], batch_window_s=0.02) as scheduler:

        async def one(i: int) -> str:
            events = await collect(
                scheduler,
                request(f"b{i}", target=f"doc{i}", priority="batch"),
                prompt(f"line{i:02d}"),
            )
            return text_of(events)

        tasks = [asyncio.create_task(one(i)) for i in range(12)]
        await asyncio.sleep(0.005)
        tasks[3].cancel()  # one member leaves before the batch is sent
        results = []
        for i, task in enumerate(tasks):
            if i == 3:
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                results.append((i, await task))
    assert echo.sizes == [11]
    assert len(server.requests) == 1
    assert results == [(i, f"#line{i:02d}") for i in range(12) if i != 3]
    body = json.loads(server.requests[0].body)
    assert len(body["prompt"]) == 11
    assert body["stream"] is False


async def test_leaving_a_sent_batch_keeps_the_others(loopback: StartServer) -> None:
    echo = EchoBatch()
    server = await loopback(echo)
    async with scheduler_for([openai_config("vllm", server.url)], batch_window_s=0.01) as scheduler:
        tasks = [
            asyncio.create_task(
                collect(
                    scheduler, request(f"b{i}", target=f"d{i}", priority="batch"), prompt(f"xx{i}")
                )
            )
            for i in range(3)
        ]
        await server.wait_for(lambda: len(server.requests) == 1)
        scheduler.cancel("b0")
        with pytest.raises(RequestDropped):
            await tasks[0]
        assert [text_of(await t) for t in tasks[1:]] == ["#xx1", "#xx2"]
    assert server.disconnects == []
    assert server.requests[0].finished

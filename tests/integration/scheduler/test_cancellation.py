"""Cancelling in the scheduler closes the upstream socket: the loopback server sees it."""

from __future__ import annotations

import asyncio
import time

import pytest

from anyfill.daemon.errors import RequestDropped
from tests.integration.scheduler.helpers import (
    first_text,
    openai_config,
    prompt,
    request,
    scheduler_for,
)
from tests.servers.fixtures import StartServer
from tests.servers.openai import OpenAI
from tests.servers.script import Reply

ENDLESS = Reply(chunks=["tok"] * 2000, chunk_delay_s=0.01)


async def test_cancel_by_id_mid_stream_disconnects(loopback: StartServer) -> None:
    server = await loopback(OpenAI(default=ENDLESS))
    async with scheduler_for([openai_config("vllm", server.url)]) as scheduler:
        task, seen = await first_text(scheduler, request("r1"))
        await asyncio.wait_for(seen.wait(), 5)
        cancelled_at = time.monotonic()
        assert scheduler.cancel("r1")
        with pytest.raises(RequestDropped):
            await task
        gone = await server.wait_disconnect(1, within=2)
    assert gone.at - cancelled_at < 0.5
    assert gone.chunks_sent < 100, "the server must have stopped soon after the cancel"
    assert not server.requests[0].finished


async def test_superseding_request_disconnects_the_older_stream(loopback: StartServer) -> None:
    responder = OpenAI(ENDLESS, default=Reply(text="fresh"))
    server = await loopback(responder)
    async with scheduler_for([openai_config("vllm", server.url)]) as scheduler:
        old, seen = await first_text(scheduler, request("old"))
        await asyncio.wait_for(seen.wait(), 5)
        newer = [event async for event in scheduler.dispatch(request("new"), prompt("x = "))]
        with pytest.raises(RequestDropped, match="superseded by new"):
            await old
        await server.wait_disconnect(1, within=2)
    assert "".join(getattr(e, "chunk", "") for e in newer) == "fresh"
    assert len(server.requests) == 2


async def test_cancel_before_the_first_header_disconnects(loopback: StartServer) -> None:
    server = await loopback(OpenAI(default=Reply(delay_s=5)))
    async with scheduler_for([openai_config("vllm", server.url)]) as scheduler:
        task, _ = await first_text(scheduler, request("r1"))
        await server.wait_for(lambda: len(server.requests) == 1)
        scheduler.cancel("r1")
        with pytest.raises(RequestDropped):
            await task
        gone = await server.wait_disconnect(1, within=2)
    assert gone.chunks_sent == 0


async def test_connection_is_reused_after_a_complete_answer(loopback: StartServer) -> None:
    server = await loopback(OpenAI(default=Reply(text="ok")))
    async with scheduler_for([openai_config("vllm", server.url)]) as scheduler:
        for i in range(3):
            events = [
                e
                async for e in scheduler.dispatch(request(f"r{i}", target=f"t{i}"), prompt(f"x{i}"))
            ]
            assert events
    assert [r.connection for r in server.requests] == [1, 1, 1]
    assert server.disconnects == []


async def test_the_engine_uses_the_scheduler_and_publishes_its_metrics(
    loopback: StartServer,
) -> None:
    from anyfill.config.model import Settings
    from anyfill.daemon.bus import EventBus
    from anyfill.daemon.engine.engine import Engine
    from anyfill.daemon.scheduler import Scheduler
    from anyfill.daemon.scheduler.events import AttemptFinished

    server = await loopback(OpenAI(ENDLESS, default=Reply(text="x + 1")))
    settings = Settings(backends=[openai_config("vllm", server.url)], routing={"default": ["vllm"]})
    bus = EventBus()
    attempts = bus.subscribe(AttemptFinished)
    async with Engine(settings, bus=bus) as engine:
        assert isinstance(engine.dispatcher, Scheduler)
        old = asyncio.create_task(engine.complete(request("r1")))
        await server.wait_for(lambda: len(server.requests) == 1)
        await asyncio.sleep(0.05)  # let a few chunks stream
        newer = await engine.complete(request("r2"))  # same target: latest wins
        with pytest.raises(RequestDropped, match="superseded by r2"):
            await old
        await server.wait_disconnect(1, within=2)
    assert newer.raw == "x + 1"
    outcomes = [attempts.get_nowait().outcome for _ in range(2)]
    assert sorted(outcomes) == ["ok", "superseded"]

"""Batching: prefetch/batch requests to a prompt-list backend travel together."""

from __future__ import annotations

import asyncio

import pytest

from anyfill.config.model import RoutingConfig
from anyfill.daemon.completion import Attempt, DispatchEvent, Finished, Text
from anyfill.daemon.errors import RequestDropped, ServerError
from anyfill.daemon.scheduler.clock import ManualClock
from anyfill.daemon.scheduler.scheduler import Scheduler
from tests.unit.scheduler.fakes import FakeBackend, FakeBatchBackend, Reply, prompt, request


async def run(scheduler: Scheduler, rid: str, priority: str = "batch") -> list[DispatchEvent]:
    return [
        event
        async for event in scheduler.dispatch(
            request(rid, target=rid, priority=priority), prompt(prefix=rid)
        )
    ]


def spawn(
    scheduler: Scheduler, rid: str, priority: str = "batch"
) -> asyncio.Task[list[DispatchEvent]]:
    return asyncio.create_task(run(scheduler, rid, priority))


def text(events: list[DispatchEvent]) -> str:
    return "".join(e.chunk for e in events if isinstance(e, Text))


async def test_requests_within_the_window_share_one_request_and_fan_out() -> None:
    clock = ManualClock()
    backend = FakeBatchBackend("vllm", clock)
    async with Scheduler(
        [backend], RoutingConfig(default=["vllm"]), clock=clock, batch_window_s=0.01
    ) as scheduler:
        tasks = [spawn(scheduler, f"q{i}") for i in range(5)]
        await clock.advance(0.005)
        tasks.append(spawn(scheduler, "q5"))
        await clock.advance(0.5)
        results = await asyncio.gather(*tasks)
        assert backend.batches == [[f"q{i}" for i in range(6)]]
        for i, events in enumerate(results):
            assert events[0] == Attempt("vllm")
            assert text(events) == f"<q{i}>"
            assert isinstance(events[-1], Finished)
            assert events[-1].usage.prompt_tokens == 10
        late = spawn(scheduler, "late")
        await clock.advance(0.5)
        assert text(await late) == "<late>"
        assert backend.batches[-1] == ["late"]
        assert scheduler.background_tasks == 0


async def test_a_full_batch_goes_at_once() -> None:
    clock = ManualClock()
    backend = FakeBatchBackend("vllm", clock, batch_delay=0)
    async with Scheduler(
        [backend], RoutingConfig(default=["vllm"]), clock=clock, batch_window_s=1, batch_max=4
    ) as scheduler:
        tasks = [spawn(scheduler, f"q{i}") for i in range(6)]
        await clock.settle()
        assert backend.batches == [["q0", "q1", "q2", "q3"]]
        await clock.advance(1)
        await asyncio.gather(*tasks)
        assert backend.batches[1] == ["q4", "q5"]


async def test_interactive_requests_are_streamed_not_batched() -> None:
    clock = ManualClock()
    backend = FakeBatchBackend("vllm", clock)
    async with Scheduler([backend], RoutingConfig(default=["vllm"]), clock=clock) as scheduler:
        events = await run(scheduler, "now", priority="interactive")
    assert text(events) == "hello world"
    assert backend.batches == []


async def test_leaving_before_sending_removes_only_that_prompt() -> None:
    clock = ManualClock()
    backend = FakeBatchBackend("vllm", clock)
    async with Scheduler(
        [backend], RoutingConfig(default=["vllm"]), clock=clock, batch_window_s=0.01
    ) as scheduler:
        tasks = [spawn(scheduler, f"q{i}") for i in range(4)]
        await clock.settle()
        scheduler.cancel("q1")
        await clock.advance(0.5)
        with pytest.raises(RequestDropped):
            await tasks[1]
        assert [text(await tasks[i]) for i in (0, 2, 3)] == ["<q0>", "<q2>", "<q3>"]
    assert backend.batches == [["q0", "q2", "q3"]]


async def test_leaving_after_sending_does_not_cancel_the_others() -> None:
    clock = ManualClock()
    backend = FakeBatchBackend("vllm", clock, batch_delay=0.2)
    async with Scheduler(
        [backend], RoutingConfig(default=["vllm"]), clock=clock, batch_window_s=0.01
    ) as scheduler:
        tasks = [spawn(scheduler, f"q{i}") for i in range(3)]
        await clock.advance(0.1)
        assert backend.batch_open == 1
        scheduler.cancel("q0")
        await clock.settle()
        with pytest.raises(RequestDropped):
            await tasks[0]
        assert backend.batch_open == 1, "the batch request must stay open for the others"
        await clock.advance(0.2)
        assert [text(await t) for t in tasks[1:]] == ["<q1>", "<q2>"]
        assert backend.batch_completed == 1


async def test_when_every_member_leaves_the_batch_request_is_cancelled() -> None:
    clock = ManualClock()
    backend = FakeBatchBackend("vllm", clock, batch_delay=5)
    async with Scheduler(
        [backend], RoutingConfig(default=["vllm"]), clock=clock, batch_window_s=0.01
    ) as scheduler:
        tasks = [spawn(scheduler, f"q{i}") for i in range(3)]
        await clock.advance(0.1)
        assert backend.batch_open == 1
        for i in range(3):
            scheduler.cancel(f"q{i}")
        await clock.settle()
        for task in tasks:
            with pytest.raises(RequestDropped):
                await task
        assert backend.batch_open == 0
        assert backend.batch_completed == 0
        assert scheduler.background_tasks == 0


async def test_a_failed_batch_cools_down_and_each_member_falls_back() -> None:
    clock = ManualClock()
    batcher = FakeBatchBackend("vllm", clock, url="http://127.0.0.1:1")
    batcher.batch_error = ServerError("vllm", "503 overloaded")
    spare = FakeBackend("spare", clock, url="http://127.0.0.1:2", default=Reply(chunks=("spare",)))
    routing = RoutingConfig(default=["vllm", "spare"])
    async with Scheduler([batcher, spare], routing, clock=clock, batch_window_s=0.01) as scheduler:
        tasks = [spawn(scheduler, f"q{i}") for i in range(3)]
        await clock.advance(0.5)
        results = await asyncio.gather(*tasks)
    assert all(text(events) == "spare" for events in results)
    assert len(batcher.batches) == 1
    assert len(spare.calls) == 3
    assert scheduler.cooling("vllm") > 0

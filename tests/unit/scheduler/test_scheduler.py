"""The scheduler with fake backends on a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from anyfill.config.model import Limits, Price, RoutingConfig, Timeouts
from anyfill.daemon.backends.base import Plan, Usage
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.inprocess import Subscription
from anyfill.daemon.completion import (
    Attempt,
    CompletionRequest,
    DispatchEvent,
    Finished,
    Planned,
    Text,
)
from anyfill.daemon.errors import (
    AuthError,
    BackendTimeout,
    BackendUnavailable,
    BadRequest,
    ModelNotFound,
    RateLimited,
    RequestDropped,
    ServerError,
)
from anyfill.daemon.scheduler.clock import ManualClock
from anyfill.daemon.scheduler.events import AttemptFinished, CooldownChanged
from anyfill.daemon.scheduler.scheduler import Scheduler
from tests.unit.scheduler.fakes import FakeBackend, Reply, prompt, request


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def drain(subscription: Subscription) -> list[object]:
    """Every event queued so far."""
    events = []
    while True:
        try:
            events.append(subscription.get_nowait())
        except asyncio.QueueEmpty:
            return events


def text_of(events: list[DispatchEvent]) -> str:
    return "".join(e.chunk for e in events if isinstance(e, Text))


async def collect(scheduler: Scheduler, req: CompletionRequest, **kw: str) -> list[DispatchEvent]:
    return [event async for event in scheduler.dispatch(req, prompt(**kw))]


def start(
    scheduler: Scheduler, req: CompletionRequest, **kw: str
) -> asyncio.Task[list[DispatchEvent]]:
    return asyncio.create_task(collect(scheduler, req, **kw))


async def test_events_in_order_with_plan_and_usage(clock: ManualClock) -> None:
    backend = FakeBackend(
        "a",
        clock,
        default=Reply(chunks=("x", "y"), usage=Usage(12, 2), plan=Plan("template", "qwen")),
    )
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        events = await collect(scheduler, request("r1"))
    assert events == [
        Attempt("a"),
        Planned(Plan("template", "qwen")),
        Text("x"),
        Text("y"),
        Finished(Usage(12, 2)),
    ]
    assert scheduler.live_requests == 0


async def test_superseded_before_sending_is_never_sent(clock: ManualClock) -> None:
    backend = FakeBackend(
        "a", clock, limits=Limits(max_concurrent=1), default=Reply(first_delay=1.0)
    )
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        busy = start(scheduler, request("r0", target="other"))
        await clock.settle()
        old = start(scheduler, request("r1", target="editor"), prefix="old")
        await clock.settle()
        new = start(scheduler, request("r2", target="editor"), prefix="new")
        await clock.settle()
        with pytest.raises(RequestDropped, match="superseded by r2"):
            await old
        await clock.advance(3)
        await busy
        assert text_of(await new) == "hello world"
    assert backend.prompts_sent == ["def f(", "new"]


async def test_superseding_a_stream_closes_it_at_once(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(chunks=("a",) * 10, chunk_delay=0.1))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        old = start(scheduler, request("r1"))
        await clock.advance(0.25)
        assert backend.open == 1
        superseded_at = clock.now()
        new = start(scheduler, request("r2"))
        await clock.settle()
        with pytest.raises(RequestDropped) as info:
            await old
        assert info.value.reason == "superseded by r2"
        first = backend.calls[0]
        assert first.ended == superseded_at
        assert not first.completed
        await clock.advance(2)
        assert text_of(await new) == "a" * 10


async def test_lower_priority_does_not_supersede_interactive(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(first_delay=0.5))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        interactive = start(scheduler, request("r1"))
        await clock.settle()
        prefetch = start(scheduler, request("r2", priority="prefetch"))
        batch = start(scheduler, request("r3", priority="batch"))
        await clock.advance(1)
        for task in (interactive, prefetch, batch):
            assert text_of(await task) == "hello world"


async def test_cancel_by_id_closes_the_stream(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(chunks=("a",) * 10, chunk_delay=0.1))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(0.15)
        assert scheduler.cancel("r1") is True
        assert scheduler.cancel("nope") is False
        await clock.settle()
        with pytest.raises(RequestDropped, match="cancelled"):
            await task
        assert backend.open == 0
        assert backend.calls[0].ended == clock.now()


async def test_cancel_while_the_consumer_holds_an_event_stops_at_the_next_one(
    clock: ManualClock,
) -> None:
    backend = FakeBackend("a", clock, default=Reply(chunks=("a", "b", "c")))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        seen: list[DispatchEvent] = []

        async def consume() -> None:
            async for event in scheduler.dispatch(request("r1"), prompt()):
                seen.append(event)
                if isinstance(event, Text):
                    scheduler.cancel("r1")

        with pytest.raises(RequestDropped):
            await consume()
        assert text_of(seen) == "a"
        assert backend.open == 0


async def test_consumer_leaving_early_closes_the_stream(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(chunks=("a",) * 5))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        events = scheduler.dispatch(request("r1"), prompt())
        assert isinstance(events, AsyncIterator)
        async for event in events:
            if isinstance(event, Text):
                break
        await events.aclose()  # type: ignore[attr-defined]
        assert backend.open == 0
        assert scheduler.live_requests == 0


async def test_external_task_cancellation_stays_a_cancellation(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(first_delay=1))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.settle()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert backend.open == 0
        assert scheduler.live_requests == 0


async def test_priorities_then_arrival_order(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, limits=Limits(max_concurrent=1), default=Reply(first_delay=1))
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        tasks = [start(scheduler, request("busy", target="t0"), prefix="busy")]
        await clock.settle()
        for rid, priority in [
            ("b1", "batch"),
            ("p1", "prefetch"),
            ("i1", "interactive"),
            ("i2", "interactive"),
        ]:
            tasks.append(start(scheduler, request(rid, target=rid, priority=priority), prefix=rid))
            await clock.settle()
        await clock.advance(10)
        await asyncio.gather(*tasks)
    assert backend.prompts_sent == ["busy", "i1", "i2", "p1", "b1"]


async def test_deadline_drops_unsent_request_with_the_reason(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, limits=Limits(max_concurrent=1), default=Reply(first_delay=1))
    bus = EventBus()
    events = bus.subscribe(AttemptFinished)
    async with Scheduler(
        [backend], RoutingConfig(default=["a"]), clock=clock, bus=bus
    ) as scheduler:
        busy = start(scheduler, request("busy", target="t0"))
        await clock.settle()
        late = start(scheduler, request("r1", deadline=clock.now() + 0.3), prefix="late")
        await clock.advance(0.5)
        with pytest.raises(
            RequestDropped, match=r"past its deadline after 300 ms in the queue for 'a'"
        ):
            await late
        await clock.advance(1)
        await busy
        already = start(scheduler, request("r2", deadline=clock.now() - 1))
        with pytest.raises(RequestDropped, match="past its deadline"):
            await already
    assert "late" not in backend.prompts_sent
    outcomes = []
    while True:
        try:
            outcomes.append(events.get_nowait().outcome)
        except asyncio.QueueEmpty:
            break
    assert outcomes.count("deadline") == 2


async def test_rate_limited_backend_cools_down_for_retry_after_and_falls_back(
    clock: ManualClock,
) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    b = FakeBackend("b", clock, url="http://127.0.0.1:2", default=Reply(chunks=("from b",)))
    a.script.append(
        Reply(status=429, headers={"Retry-After": "7"}, error=RateLimited("a", "429 from a"))
    )
    bus = EventBus()
    cooldowns = bus.subscribe(CooldownChanged)
    async with Scheduler(
        [a, b], RoutingConfig(default=["a", "b"]), clock=clock, bus=bus
    ) as scheduler:
        events = await collect(scheduler, request("r1"))
        assert [e for e in events if isinstance(e, Attempt)] == [Attempt("a"), Attempt("b")]
        assert text_of(events) == "from b"
        assert scheduler.cooling("a") == pytest.approx(7)
        event = cooldowns.get_nowait()
        assert event.backend == "a"
        assert event.seconds_left == pytest.approx(7)
        await clock.advance(6.9)
        events = await collect(scheduler, request("r2"))
        assert [e for e in events if isinstance(e, Attempt)] == [Attempt("b")]
        assert len(a.calls) == 1, "no request may reach a cooling backend"
        await clock.advance(0.11)
        events = await collect(scheduler, request("r3"), prefix="another")
        assert text_of(events) == "hello world"
        assert len(a.calls) == 2


async def test_the_end_of_a_cooldown_is_published(clock: ManualClock) -> None:
    """``CooldownChanged`` is retained state: its end must be announced too."""
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    a.script.append(Reply(status=429, headers={"Retry-After": "7"}, error=RateLimited("a", "429")))
    bus = EventBus()
    cooldowns = bus.subscribe(CooldownChanged)
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock, bus=bus) as scheduler:
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r1"))
        assert cooldowns.get_nowait().cooling
        await clock.advance(6.9)
        assert drain(cooldowns) == []
        await clock.advance(0.2)
        assert cooldowns.get_nowait() == CooldownChanged("a", False)
        assert text_of(await collect(scheduler, request("r2"))) == "hello world"
        assert drain(cooldowns) == []


async def test_a_cooldown_extended_meanwhile_ends_once_at_its_new_end(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    a.script.append(Reply(error=ServerError("a", "500 from a")))  # soft: still asked
    a.script.append(Reply(status=429, headers={"Retry-After": "9"}, error=RateLimited("a", "429")))
    bus = EventBus()
    cooldowns = bus.subscribe(CooldownChanged)
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock, bus=bus) as scheduler:
        with pytest.raises(ServerError):
            await collect(scheduler, request("r1"))
        await clock.advance(1)
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r2"))
        assert [e.cooling for e in drain(cooldowns)] == [True, True]
        await clock.advance(8.9)  # past the first cooldown's end, before the second's
        assert drain(cooldowns) == []
        await clock.advance(0.2)
        assert drain(cooldowns) == [CooldownChanged("a", False)]


async def test_an_answer_with_its_quota_used_up_announces_the_pause(clock: ManualClock) -> None:
    used_up = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6s"}
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    a.script.append(Reply(headers=used_up))
    bus = EventBus()
    cooldowns = bus.subscribe(CooldownChanged)
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock, bus=bus) as scheduler:
        assert text_of(await collect(scheduler, request("r1"))) == "hello world"
        (started,) = drain(cooldowns)
        assert started.cooling
        assert started.seconds_left == pytest.approx(6)
        await clock.advance(6.1)
        assert drain(cooldowns) == [CooldownChanged("a", False)]


async def test_a_soft_cooldown_ends_with_the_next_answer(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    a.script.append(Reply(error=ServerError("a", "500 from a")))
    bus = EventBus()
    cooldowns = bus.subscribe(CooldownChanged)
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock, bus=bus) as scheduler:
        with pytest.raises(ServerError):
            await collect(scheduler, request("r1"))
        assert scheduler.cooling("a") > 0
        # A soft cooldown only moves a backend to the end of the chain: it is still asked.
        assert text_of(await collect(scheduler, request("r2"))) == "hello world"
        assert scheduler.cooling("a") == 0
        assert [e.cooling for e in drain(cooldowns)] == [True, False]
        await clock.advance(60)
        assert drain(cooldowns) == []


async def test_retry_after_ms_header_via_observer(clock: ManualClock) -> None:
    a = FakeBackend("a", clock)
    a.script.append(
        Reply(status=503, headers={"retry-after-ms": "2500"}, error=ServerError("a", "503"))
    )
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        with pytest.raises(ServerError):
            await collect(scheduler, request("r1"))
        assert scheduler.cooling("a") == pytest.approx(2.5)
        with pytest.raises(BackendUnavailable, match=r"cooling down for another 2\.5 s"):
            await collect(scheduler, request("r2"))
        assert len(a.calls) == 1


async def test_shared_key_and_url_share_the_cooldown(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:5", api_key="k1")
    twin = FakeBackend("twin", clock, url="http://127.0.0.1:5", api_key="k1")
    other = FakeBackend("other", clock, url="http://127.0.0.1:5", api_key="k2")
    a.script.append(Reply(error=RateLimited("a", "429", retry_after=30)))
    async with Scheduler([a, twin, other], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r1"))
        assert scheduler.cooling("twin") == pytest.approx(30)
        assert scheduler.cooling("other") == 0
        with pytest.raises(RateLimited, match=r"rate-limited for another 30\.0 s"):
            await collect(scheduler, request("r2", backends=("twin",)))
        assert twin.calls == []


@pytest.mark.parametrize(
    "error",
    [
        AuthError("a", "the key was refused (401)", status=401),
        AuthError("a", "forbidden (403)", status=403),
        ModelNotFound("a", "model not found (404)", status=404),
        BadRequest("a", "bad request (400)", status=400),
    ],
)
async def test_client_errors_stop_without_retry_or_fallback(
    clock: ManualClock, error: Exception
) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    b = FakeBackend("b", clock, url="http://127.0.0.1:2")
    a.script.append(Reply(error=error))
    async with Scheduler([a, b], RoutingConfig(default=["a", "b"]), clock=clock) as scheduler:
        with pytest.raises(type(error)) as info:
            await collect(scheduler, request("r1"))
        assert info.value is error
        assert b.calls == []
        assert len(a.calls) == 1
        assert scheduler.cooling("a") == 0


async def test_server_error_and_connection_error_fall_back(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    b = FakeBackend("b", clock, url="http://127.0.0.1:2")
    c = FakeBackend("c", clock, url="http://127.0.0.1:3", default=Reply(chunks=("c!",)))
    a.script.append(Reply(error=ServerError("a", "500")))
    b.script.append(Reply(error=ConnectionResetError("reset by peer")))
    async with Scheduler(
        [a, b, c], RoutingConfig(default=["a", "b", "c"]), clock=clock
    ) as scheduler:
        events = await collect(scheduler, request("r1"))
    assert text_of(events) == "c!"
    assert scheduler.cooling("a") == pytest.approx(2.0)
    assert scheduler.cooling("b") == pytest.approx(1.0)


async def test_failure_mid_stream_falls_back_and_restarts_the_text(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    b = FakeBackend("b", clock, url="http://127.0.0.1:2", default=Reply(chunks=("fresh",)))
    a.script.append(
        Reply(chunks=("par", "tial"), error=ServerError("a", "stream broke"), error_after=1)
    )
    async with Scheduler([a, b], RoutingConfig(default=["a", "b"]), clock=clock) as scheduler:
        events = await collect(scheduler, request("r1"))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["Attempt", "Planned", "Text", "Attempt", "Planned", "Text", "Finished"]
    assert events[3] == Attempt("b")
    assert events[-2] == Text("fresh")


async def test_without_fallback_the_first_error_is_raised(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    b = FakeBackend("b", clock, url="http://127.0.0.1:2")
    a.script.append(Reply(error=ServerError("a", "500")))
    routing = RoutingConfig(default=["a", "b"], fallback=False)
    async with Scheduler([a, b], routing, clock=clock) as scheduler:
        with pytest.raises(ServerError):
            await collect(scheduler, request("r1"))
    assert b.calls == []


async def test_first_token_timeout_cools_down_and_falls_back(clock: ManualClock) -> None:
    a = FakeBackend(
        "a",
        clock,
        url="http://127.0.0.1:1",
        timeouts=Timeouts(first_token_s=2),
        default=Reply(first_delay=5),
    )
    b = FakeBackend("b", clock, url="http://127.0.0.1:2", default=Reply(chunks=("b",)))
    async with Scheduler([a, b], RoutingConfig(default=["a", "b"]), clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(1.9)
        assert not task.done()
        await clock.advance(0.2)
        events = await task
        assert text_of(events) == "b"
        assert a.calls[0].ended == pytest.approx(clock.now() - 0.1)
        assert not a.calls[0].completed
        assert scheduler.cooling("a") > 0


async def test_total_timeout(clock: ManualClock) -> None:
    a = FakeBackend(
        "a", clock, timeouts=Timeouts(total_s=1), default=Reply(chunks=("x",) * 50, chunk_delay=0.1)
    )
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(1.05)
        with pytest.raises(BackendTimeout, match="did not finish within 1 s"):
            await task
        assert a.open == 0


async def test_all_backends_cooling_fails_fast_with_the_wait(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    b = FakeBackend("b", clock, url="http://127.0.0.1:2")
    a.script.append(Reply(error=RateLimited("a", "429", retry_after=20)))
    b.script.append(Reply(error=RateLimited("b", "429", retry_after=40)))
    async with Scheduler([a, b], RoutingConfig(default=["a", "b"]), clock=clock) as scheduler:
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r1"))
        with pytest.raises(RateLimited) as info:
            await collect(scheduler, request("r2"))
        assert "every backend failed" in "".join(info.value.__notes__)
        assert "rate-limited for another 40.0 s" in str(info.value)


async def test_hedging_starts_the_next_backend_and_cancels_the_loser(clock: ManualClock) -> None:
    slow = FakeBackend(
        "slow", clock, url="http://127.0.0.1:1", default=Reply(first_delay=1.0, chunks=("slow",))
    )
    fast = FakeBackend(
        "fast", clock, url="http://127.0.0.1:2", default=Reply(first_delay=0.05, chunks=("fast",))
    )
    bus = EventBus()
    finished = bus.subscribe(AttemptFinished)
    routing = RoutingConfig(default=["slow", "fast"], hedge_after_ms=100)
    async with Scheduler([slow, fast], routing, clock=clock, bus=bus) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(0.099)
        assert fast.calls == []
        await clock.advance(0.001)
        assert len(fast.calls) == 1
        assert fast.calls[0].started == pytest.approx(clock.now())
        await clock.advance(0.05)
        events = await task
        assert [e for e in events if isinstance(e, Attempt)] == [Attempt("fast")]
        assert text_of(events) == "fast"
        assert slow.open == 0
        assert not slow.calls[0].completed
        assert slow.calls[0].ended == pytest.approx(clock.now())
    outcomes = {}
    while True:
        try:
            event = finished.get_nowait()
        except asyncio.QueueEmpty:
            break
        outcomes[event.backend] = event.outcome
    assert outcomes == {"slow": "hedge_lost", "fast": "ok"}


async def test_hedging_not_needed_when_the_first_is_quick(clock: ManualClock) -> None:
    first = FakeBackend("first", clock, url="http://127.0.0.1:1", default=Reply(first_delay=0.02))
    second = FakeBackend("second", clock, url="http://127.0.0.1:2")
    routing = RoutingConfig(default=["first", "second"], hedge_after_ms=100)
    async with Scheduler([first, second], routing, clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(1)
        events = await task
    assert text_of(events) == "hello world"
    assert second.calls == []


async def test_hedging_falls_back_when_the_first_fails(clock: ManualClock) -> None:
    first = FakeBackend("first", clock, url="http://127.0.0.1:1")
    second = FakeBackend("second", clock, url="http://127.0.0.1:2", default=Reply(chunks=("2",)))
    first.script.append(Reply(error=ServerError("first", "502")))
    routing = RoutingConfig(default=["first", "second"], hedge_after_ms=100)
    async with Scheduler([first, second], routing, clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(0.01)
        events = await task
    assert text_of(events) == "2"
    assert [e for e in events if isinstance(e, Attempt)] == [Attempt("second")]


async def test_superseding_a_hedged_request_closes_both_streams(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1", default=Reply(first_delay=5))
    b = FakeBackend("b", clock, url="http://127.0.0.1:2", default=Reply(first_delay=5))
    routing = RoutingConfig(default=["a", "b"], hedge_after_ms=100)
    async with Scheduler([a, b], routing, clock=clock) as scheduler:
        task = start(scheduler, request("r1"))
        await clock.advance(0.2)
        assert a.open == 1
        assert b.open == 1
        scheduler.cancel("r1")
        with pytest.raises(RequestDropped):
            await task
        assert a.open == 0
        assert b.open == 0


async def test_cache_type_through_and_prefetched_answers(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(chunks=("return ", "a + b")))
    head = "def add(a, b):\n    "
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        first = await collect(scheduler, request("r1"), prefix=head)
        typed = await collect(scheduler, request("r2"), prefix=head + "retu")
        assert len(backend.calls) == 1
        # Pressing the hotkey again at the same place means "try again": ask the backend.
        again = await collect(scheduler, request("r3"), prefix=head)
        assert len(backend.calls) == 2
        # A prefetch fetched ahead is served once to the interactive request that follows.
        await collect(scheduler, request("p1", priority="prefetch"), prefix="x = ")
        shown = await collect(scheduler, request("r4"), prefix="x = ")
        assert len(backend.calls) == 3
        await collect(scheduler, request("r5"), prefix="x = ")
        assert len(backend.calls) == 4
    assert text_of(first) == text_of(again) == text_of(shown) == "return a + b"
    assert text_of(typed) == "rn a + b"
    assert scheduler.metrics.summary("a").outcomes == (("cache", 2), ("ok", 4))


async def test_metrics_costs_and_events(clock: ManualClock) -> None:
    backend = FakeBackend(
        "paid",
        clock,
        price=Price(input_per_mtok=2.0, output_per_mtok=10.0),
        default=Reply(first_delay=0.2, chunk_delay=0.1, usage=Usage(1000, 100)),
    )
    bus = EventBus()
    seen: list[object] = []
    bus.listen(seen.append)
    async with Scheduler(
        [backend], RoutingConfig(default=["paid"]), clock=clock, bus=bus
    ) as scheduler:
        for i in range(3):
            task = start(scheduler, request(f"r{i}", target=f"t{i}"), prefix=f"x{i}")
            await clock.advance(1)
            await task
    summary = scheduler.metrics.summary("paid")
    assert summary.requests == 3
    assert summary.outcomes == (("ok", 3),)
    assert summary.first_token_ms_p50 == pytest.approx(200)
    assert summary.total_ms_p50 == pytest.approx(300)
    assert summary.prompt_tokens_today == 3000
    assert summary.completion_tokens_today == 300
    assert summary.cost_today == pytest.approx(3 * (1000 * 2 + 100 * 10) / 1e6)
    attempts = [e for e in seen if isinstance(e, AttemptFinished)]
    assert len(attempts) == 3
    assert all(a.cost == pytest.approx(0.003) for a in attempts)


async def test_unknown_backend_is_a_config_error(clock: ManualClock) -> None:
    from anyfill.daemon.errors import ConfigError

    backend = FakeBackend("a", clock)
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        with pytest.raises(ConfigError, match="no enabled backend named 'zzz'"):
            await collect(scheduler, request("r1", backends=("zzz",)))


async def test_token_limit_uses_reported_usage(clock: ManualClock) -> None:
    backend = FakeBackend(
        "a",
        clock,
        limits=Limits(tokens_per_minute=1000, max_concurrent=8),
        default=Reply(usage=Usage(prompt_tokens=900, completion_tokens=50)),
    )
    async with Scheduler([backend], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        await collect(scheduler, request("r1", target="a"), prefix="one")
        second = start(scheduler, request("r2", target="b"), prefix="two")
        await clock.advance(59)
        assert not second.done(), "950 reported tokens leave no room for another estimate"
        await clock.advance(1.5)
        await second
    assert backend.prompts_sent == ["one", "two"]


async def test_shutdown_drops_live_requests(clock: ManualClock) -> None:
    backend = FakeBackend("a", clock, default=Reply(first_delay=10))
    scheduler = Scheduler([backend], RoutingConfig(default=["a"]), clock=clock)
    task = start(scheduler, request("r1"))
    await clock.settle()
    await scheduler.aclose()
    with pytest.raises(RequestDropped, match="shutting down"):
        await task
    with pytest.raises(RequestDropped, match="shut down"):
        await collect(scheduler, request("r2"))


async def test_soft_cooldown_moves_a_backend_last_but_still_asks_it(clock: ManualClock) -> None:
    a = FakeBackend("a", clock, url="http://127.0.0.1:1", default=Reply(chunks=("a",)))
    b = FakeBackend("b", clock, url="http://127.0.0.1:2", default=Reply(chunks=("b",)))
    a.script.append(Reply(error=ServerError("a", "500 with no Retry-After")))
    b.script.append(Reply(error=ServerError("b", "500")))
    async with Scheduler([a, b], RoutingConfig(default=["a", "b"]), clock=clock) as scheduler:
        with pytest.raises(ServerError):
            await collect(scheduler, request("r1"))
        assert scheduler.cooling("a") > 0
        assert scheduler.cooling("b") > 0
        # Both cool softly: still asked, in chain order, rather than failing unasked.
        assert text_of(await collect(scheduler, request("r2"), prefix="2")) == "a"
        b.script.append(Reply(chunks=("b again",)))
        a.script.append(Reply(error=ServerError("a", "500")))
        assert text_of(await collect(scheduler, request("r3"), prefix="3")) == "b again"
        # a cools softly again and b is healthy: b goes first now.
        assert text_of(await collect(scheduler, request("r4"), prefix="4")) == "b"
    assert [len(a.calls), len(b.calls)] == [3, 3]


async def test_tokens_today_start_over_on_a_new_day(clock: ManualClock) -> None:
    import datetime as dt

    from anyfill.daemon.scheduler.metrics import Metrics

    day = [dt.date(2026, 11, 30)]
    metrics = Metrics(clock, prices={"p": Price(input_per_mtok=1.0)}, today=lambda: day[0])
    event = AttemptFinished("r1", "p", "ok", prompt_tokens=1000, cost=0.001)
    metrics.record(event)
    metrics.record(event)
    assert metrics.summary("p").prompt_tokens_today == 2000
    day[0] = dt.date(2026, 12, 1)
    assert metrics.summary("p").prompt_tokens_today == 0
    metrics.record(event)
    summary = metrics.summary("p")
    assert summary.prompt_tokens_today == 1000
    assert summary.cost_today == pytest.approx(0.001)
    assert summary.requests == 3


@pytest.mark.parametrize("hedge_ms", [0, 100])
async def test_a_backend_that_could_not_be_built_ends_the_chain_with_its_error(
    clock: ManualClock, hedge_ms: int
) -> None:
    from anyfill.daemon.errors import NeedsKeyError

    local = FakeBackend("local", clock, url="http://127.0.0.1:1")
    spare = FakeBackend("spare", clock, url="http://127.0.0.1:2")
    local.script.append(Reply(error=ServerError("local", "500")))
    missing = NeedsKeyError("backend 'cloud' needs an API key: anyfill config set-key cloud")
    routing = RoutingConfig(default=["local", "spare"], hedge_after_ms=hedge_ms)
    async with Scheduler(
        [local, spare], routing, clock=clock, unusable={"cloud": missing}
    ) as scheduler:
        with pytest.raises(NeedsKeyError) as info:
            await collect(scheduler, request("r1", backends=("cloud",)))
        assert info.value is missing
        spare.script.append(Reply(error=ServerError("spare", "502")))
        with pytest.raises(NeedsKeyError):
            await collect(scheduler, request("r2", backends=("local", "spare", "cloud")))
    assert len(local.calls) == 1
    assert len(spare.calls) == 1


async def test_backends_with_the_same_key_and_url_share_one_limiter(clock: ManualClock) -> None:
    # Two routes to one quota (e.g. /infill and /v1/completions of one llama-server).
    a = FakeBackend(
        "a",
        clock,
        url="http://127.0.0.1:5",
        api_key="k",
        limits=Limits(max_concurrent=1),
        default=Reply(first_delay=1),
    )
    twin = FakeBackend(
        "twin",
        clock,
        url="http://127.0.0.1:5",
        api_key="k",
        limits=Limits(max_concurrent=4),
        default=Reply(first_delay=1),
    )
    async with Scheduler([a, twin], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        first = start(scheduler, request("r1", target="x"))
        await clock.settle()
        second = start(scheduler, request("r2", target="y", backends=("twin",)))
        await clock.advance(0.5)
        assert twin.calls == [], "the stricter max_concurrent of the shared quota applies"
        await clock.advance(1)
        assert len(twin.calls) == 1
        await clock.advance(1)
        await asyncio.gather(first, second)


async def test_a_timeout_while_the_caller_holds_an_event_ends_the_attempt_at_the_next_chunk(
    clock: ManualClock,
) -> None:
    # The total timer fires while the caller is busy with the first text event: the attempt
    # ends as a timeout when the caller asks for more, and the fallback starts clean.
    a = FakeBackend(
        "a", clock, url="http://127.0.0.1:1", timeouts=Timeouts(first_token_s=1, total_s=2)
    )
    b = FakeBackend("b", clock, url="http://127.0.0.1:2", default=Reply(chunks=("b",)))
    a.script.append(Reply(chunks=("x", "y"), error=ServerError("a", "broke"), error_after=1))
    async with Scheduler([a, b], RoutingConfig(default=["a", "b"]), clock=clock) as scheduler:
        seen: list[DispatchEvent] = []
        async for event in scheduler.dispatch(request("r1"), prompt()):
            seen.append(event)
            if event == Text("x"):
                await clock.advance(2.5)  # the total timer fires while we hold the event
    assert text_of(seen[seen.index(Attempt("b")) :]) == "b"
    assert scheduler.metrics.summary("a").outcomes == (("timeout", 1),)
    assert scheduler.metrics.summary("b").outcomes == (("ok", 1),)
    assert not a.calls[0].completed


def test_local_day_is_today_and_kept_until_midnight() -> None:
    import datetime as dt

    from anyfill.daemon.scheduler.metrics import LocalDay

    day = LocalDay()
    before = dt.date.today()
    got = day()
    assert got in (before, dt.date.today())
    assert day() is got  # kept: not asked again before midnight

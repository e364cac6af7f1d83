"""The limiter on a manual clock: no sleeps, exact times."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anyfill.daemon.scheduler.clock import ManualClock
from anyfill.daemon.scheduler.limiter import DeadlinePassed, Limiter, LimitSpec, Permit


def admitted_times(log: list[float], window: float = 60.0) -> int:
    """Most admissions inside any window of ``window`` seconds ending at an admission."""
    worst = 0
    for end in log:
        worst = max(worst, sum(1 for t in log if t <= end < t + window))
    return worst


async def test_requests_per_minute_never_exceeded_and_next_waits_for_the_oldest() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(requests_per_minute=3), clock)
    start = clock.now()
    got: list[float] = []

    async def one() -> None:
        permit = await limiter.acquire()
        permit.sent = True
        got.append(clock.now())
        permit.release()

    tasks = [asyncio.create_task(one()) for _ in range(7)]
    await clock.advance(200)
    await asyncio.gather(*tasks)
    assert [t - start for t in got] == [0, 0, 0, 60, 60, 60, 120]
    assert admitted_times(got) == 3


async def test_waiters_are_served_in_arrival_order_even_when_a_later_one_is_smaller() -> None:
    # aiolimiter wakes the 1-token waiter first; we keep arrival order so big ones never starve.
    clock = ManualClock()
    limiter = Limiter(LimitSpec(tokens_per_minute=10), clock)
    first = limiter.try_acquire(10)
    assert first is not None
    first.sent = True
    order: list[str] = []

    async def take(name: str, tokens: int) -> None:
        permit = await limiter.acquire(tokens=tokens)
        permit.sent = True
        order.append(name)

    big = asyncio.create_task(take("big", 8))
    await clock.settle()
    small = asyncio.create_task(take("small", 1))
    await clock.advance(59)
    assert order == []
    await clock.advance(1)
    await asyncio.gather(big, small)
    assert order == ["big", "small"]


async def test_priorities_first_then_arrival() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(max_concurrent=1), clock)
    busy = limiter.try_acquire()
    assert busy is not None
    order: list[str] = []

    async def take(name: str, priority: str) -> None:
        permit = await limiter.acquire(priority)
        order.append(name)
        permit.release()

    tasks = []
    for name, priority in [
        ("batch1", "batch"),
        ("prefetch1", "prefetch"),
        ("inter1", "interactive"),
        ("batch2", "batch"),
        ("inter2", "interactive"),
    ]:
        tasks.append(asyncio.create_task(take(name, priority)))
        await clock.settle()
    assert limiter.queued == 5
    busy.release()
    await asyncio.gather(*tasks)
    assert order == ["inter1", "inter2", "prefetch1", "batch1", "batch2"]


async def test_concurrency_slot_is_handed_over_on_release() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(max_concurrent=2), clock)
    a, b = limiter.try_acquire(), limiter.try_acquire()
    assert a is not None
    assert b is not None
    assert limiter.try_acquire() is None
    waiter = asyncio.create_task(limiter.acquire())
    await clock.settle()
    assert not waiter.done()
    a.release()
    await clock.settle()
    assert waiter.done()
    assert limiter.in_flight == 2


async def test_cancelled_waiter_and_unsent_permit_spend_nothing() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(requests_per_minute=1), clock)
    first = limiter.try_acquire()
    assert first is not None
    first.release()  # never sent: the minute's budget is refunded
    second = limiter.try_acquire()
    assert second is not None
    second.sent = True
    second.release()
    waiter = asyncio.create_task(limiter.acquire())
    await clock.settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await clock.advance(60)
    third = limiter.try_acquire()
    assert third is not None, "the cancelled waiter must not have used the next slot"


async def test_token_estimate_is_corrected_by_reported_usage() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(tokens_per_minute=1000), clock)
    permit = limiter.try_acquire(100)
    assert permit is not None
    permit.sent = True
    assert limiter.try_acquire(800) is not None  # 900 of 1000 used by the estimates
    permit.correct_tokens(180)  # the server says the first one cost more
    assert limiter.tokens is not None
    assert limiter.tokens.total == 980
    assert limiter.try_acquire(50) is None


async def test_a_request_larger_than_the_token_limit_still_runs_alone() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(tokens_per_minute=100), clock)
    permit = limiter.try_acquire(500)
    assert permit is not None


async def test_deadline_while_waiting() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(max_concurrent=1), clock)
    busy = limiter.try_acquire()
    assert busy is not None
    waiter = asyncio.create_task(limiter.acquire(deadline=clock.now() + 0.5))
    await clock.advance(0.4)
    assert not waiter.done()
    await clock.advance(0.2)
    with pytest.raises(DeadlinePassed):
        await waiter
    assert limiter.queued == 0
    busy.release()
    assert limiter.in_flight == 0


def test_shared_quota_takes_the_stricter_limits() -> None:
    a = LimitSpec(requests_per_minute=60, tokens_per_minute=0, max_concurrent=4)
    b = LimitSpec(requests_per_minute=0, tokens_per_minute=5000, max_concurrent=2)
    assert a.strictest(b) == LimitSpec(60, 5000, 2)


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=12),
    gaps=st.lists(st.floats(min_value=0, max_value=30), min_size=1, max_size=60),
)
def test_no_sixty_second_window_ever_holds_more_than_the_limit(
    limit: int, gaps: list[float]
) -> None:
    async def scenario() -> list[float]:
        clock = ManualClock()
        limiter = Limiter(LimitSpec(requests_per_minute=limit), clock)
        sent: list[float] = []

        async def one() -> None:
            permit: Permit = await limiter.acquire()
            permit.sent = True
            sent.append(clock.now())
            permit.release()

        tasks = []
        for gap in gaps:
            await clock.advance(gap)
            tasks.append(asyncio.create_task(one()))
        await clock.advance(60 * (len(gaps) // limit + 2))
        await asyncio.gather(*tasks)
        return sent

    sent = asyncio.run(scenario())
    assert len(sent) == len(gaps)
    assert admitted_times(sent) <= limit


async def test_a_request_counts_from_when_it_is_sent_not_admitted() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(requests_per_minute=1), clock)
    permit = limiter.try_acquire()
    assert permit is not None
    await clock.advance(5)  # a busy loop wrote it 5 s after admission
    permit.mark_sent(clock.now())
    permit.release()
    await clock.advance(56)
    assert limiter.try_acquire() is None, "the server saw it at 5 s: its minute is not over"
    await clock.advance(4)
    assert limiter.try_acquire() is not None


async def test_a_reshaped_limit_counts_what_the_window_already_holds() -> None:
    clock = ManualClock()
    limiter = Limiter(LimitSpec(requests_per_minute=4), clock)
    for _ in range(2):
        permit = limiter.try_acquire()
        assert permit is not None
        permit.sent = True
        permit.release()
    limiter.reshape(LimitSpec(requests_per_minute=2))  # a second worker joined the pool
    assert limiter.try_acquire() is None
    await clock.advance(60)
    assert limiter.try_acquire() is not None
    limiter.reshape(LimitSpec())
    assert limiter.requests is None

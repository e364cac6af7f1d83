"""A server's word cannot lock a backend out: pauses are capped, then a request probes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anyfill.config.model import RoutingConfig
from anyfill.daemon.completion import CompletionRequest, DispatchEvent, Text
from anyfill.daemon.errors import RateLimited, ServerError
from anyfill.daemon.scheduler.clock import ManualClock
from anyfill.daemon.scheduler.cooldown import MAX_SERVER_COOLDOWN_S, Health
from anyfill.daemon.scheduler.scheduler import Scheduler
from tests.unit.scheduler.fakes import FakeBackend, Reply, prompt, request


def test_retry_after_of_a_week_is_capped_and_probed_after() -> None:
    health = Health()
    assert health.fail(0.0, RateLimited("a", "slow down"), 999_999.0) == MAX_SERVER_COOLDOWN_S
    assert health.blocked(MAX_SERVER_COOLDOWN_S - 1)
    assert not health.blocked(MAX_SERVER_COOLDOWN_S)  # the next press asks the server again
    # The probe is refused again: another capped pause, not a week.
    health.fail(MAX_SERVER_COOLDOWN_S, RateLimited("a", "still"), 999_999.0)
    assert not health.blocked(2 * MAX_SERVER_COOLDOWN_S)


def test_a_quota_reset_far_away_is_capped_too() -> None:
    health = Health()
    health.hold_until(10.0 + 86_400, "quota used up", 10.0)
    assert health.blocked(10.0 + MAX_SERVER_COOLDOWN_S - 1)
    assert not health.blocked(10.0 + MAX_SERVER_COOLDOWN_S)


@given(
    delays=st.lists(
        st.one_of(st.none(), st.floats(min_value=-10, max_value=1e12, allow_nan=False)),
        min_size=1,
        max_size=20,
    ),
    start=st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_no_sequence_of_answers_pauses_longer_than_the_cap(
    delays: list[float | None], start: float
) -> None:
    health = Health()
    now = start
    for delay in delays:
        error = RateLimited("a", "429") if delay is not None else ServerError("a", "500")
        health.fail(now, error, delay)
        assert health.cooling_until <= now + MAX_SERVER_COOLDOWN_S
        now += 1.0


# -- the same through the scheduler: a press after the cap asks the server again ----------


async def test_a_week_long_retry_after_does_not_lock_the_daemon_out() -> None:
    clock = ManualClock()
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    a.script.append(
        Reply(status=429, headers={"Retry-After": "999999"}, error=RateLimited("a", "429"))
    )
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r1"))
        await clock.advance(MAX_SERVER_COOLDOWN_S - 1)
        with pytest.raises(RateLimited) as info:  # still paused: says when to retry
            await collect(scheduler, request("r2"))
        assert info.value.retry_after is not None
        assert info.value.retry_after <= 1.0
        assert len(a.calls) == 1
        await clock.advance(1.0)
        events = [event async for event in scheduler.dispatch(request("r3"), prompt())]
        assert "".join(e.chunk for e in events if isinstance(e, Text)) == "hello world"
        assert len(a.calls) == 2  # the probe went out and the server answered


async def test_a_quota_reset_a_day_away_is_probed_after_the_cap() -> None:
    clock = ManualClock()
    used_up = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "24h0m0s"}
    a = FakeBackend("a", clock, url="http://127.0.0.1:1")
    a.script.append(Reply(status=200, headers=used_up))
    async with Scheduler([a], RoutingConfig(default=["a"]), clock=clock) as scheduler:
        await collect(scheduler, request("r1"))
        with pytest.raises(RateLimited):
            await collect(scheduler, request("r2"))
        await clock.advance(MAX_SERVER_COOLDOWN_S)
        await collect(scheduler, request("r3"))
        assert len(a.calls) == 2


async def collect(scheduler: Scheduler, req: CompletionRequest) -> list[DispatchEvent]:
    return [event async for event in scheduler.dispatch(req, prompt())]

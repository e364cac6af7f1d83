"""A pool's limit shared by its workers, on a manual clock."""

from __future__ import annotations

from anyfill.daemon.scheduler.clock import ManualClock
from anyfill.daemon.worker.share import PoolShare


def share(clock: ManualClock, applied: list[int], limited: bool = True) -> PoolShare:
    return PoolShare("me", applied.append, window_s=60, limited=limited, clock=clock)


async def test_a_worker_alone_takes_the_whole_limit_and_shrinks_at_once_when_one_joins() -> None:
    clock = ManualClock()
    applied: list[int] = []
    pool = share(clock, applied)
    pool.online("me")  # its own retained presence comes back: nothing changes
    pool.online("other")
    assert applied == [1, 2]


async def test_a_bigger_share_waits_one_window_after_a_worker_leaves() -> None:
    clock = ManualClock()
    applied: list[int] = []
    pool = share(clock, applied)
    pool.online("a")
    pool.online("b")
    pool.offline("a")
    await clock.advance(59)
    assert applied == [1, 2, 3]  # the window still holds what 'a' sent
    await clock.advance(1)
    assert applied == [1, 2, 3, 2]
    pool.offline("b")
    pool.online("b")  # back within the window: no change, no timer left behind
    await clock.advance(120)
    assert applied == [1, 2, 3, 2]
    assert clock.pending_timers == 0


async def test_our_own_will_never_shrinks_us_to_nothing() -> None:
    clock = ManualClock()
    applied: list[int] = []
    pool = share(clock, applied)
    pool.offline("me")
    assert pool.members == {"me"}
    assert applied == [1]


def test_joining_a_limited_pool_waits_one_window_but_not_an_unlimited_one() -> None:
    clock = ManualClock()
    assert share(clock, [], limited=True).join_delay(others_seen=True) == 60
    assert share(clock, [], limited=True).join_delay(others_seen=False) == 0
    assert share(clock, [], limited=False).join_delay(others_seen=True) == 0

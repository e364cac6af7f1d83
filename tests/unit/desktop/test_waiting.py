"""first_set: the wait shared by capture (selection shown?), paste (fetched?) and the daemon
(stop or display lost)."""

from __future__ import annotations

import asyncio

import pytest

from anyfill.daemon.waiting import (
    Interrupted,
    Interruptions,
    first_set,
    interruptible,
    run_interruptibly,
)


async def test_an_event_set_already_answers_at_once_even_with_no_time_left() -> None:
    done = asyncio.Event()
    done.set()
    assert await first_set(asyncio.Event(), done, timeout_s=0)


async def test_the_first_event_set_later_ends_the_wait() -> None:
    early, never = asyncio.Event(), asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, early.set)
    assert await first_set(never, early, timeout_s=5)
    assert not never.is_set()


async def test_no_event_within_the_timeout_is_false() -> None:
    assert not await first_set(asyncio.Event(), timeout_s=0.01)
    assert not await first_set(asyncio.Event(), timeout_s=-1)


async def test_without_a_timeout_it_waits_until_one_is_set() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, stop.set)
    assert await first_set(asyncio.Event(), stop)


async def test_cancelling_the_wait_leaves_no_waiter_behind() -> None:
    event = asyncio.Event()
    task = asyncio.ensure_future(first_set(event))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    await asyncio.sleep(0)
    assert not event._waiters  # the helper's own waiter was cancelled with it


async def test_an_interrupt_ends_only_the_interruptible_part_of_a_step() -> None:
    """A cancelled step's read-only part ends at once; what follows it still runs."""
    scope = Interruptions()
    reached: list[str] = []

    async def step() -> None:
        try:
            async with interruptible():
                await asyncio.sleep(30)  # an owner dripping its transfer
        finally:
            reached.append("cleanup")

    task = run_interruptibly(step(), scope)
    await asyncio.sleep(0.01)
    scope.interrupt()
    with pytest.raises(Interrupted):
        await asyncio.wait_for(task, 1.0)
    assert reached == ["cleanup"]


async def test_an_interrupt_leaves_the_rest_of_a_step_alone() -> None:
    scope = Interruptions()
    started = asyncio.Event()

    async def step() -> str:
        started.set()
        await asyncio.sleep(0.05)  # e.g. owning the clipboard: runs to its end
        return "done"

    task = run_interruptibly(step(), scope)
    await started.wait()
    scope.interrupt()
    assert await task == "done"

"""Time as the scheduler sees it.

Everything that waits (rate limits, cooldowns, hedging, timeouts, batching windows) asks a
:class:`Clock`, so tests drive the scheduler with :class:`ManualClock` instead of sleeping.
``now()`` is on the same scale as ``time.monotonic()``, which is what
``CompletionRequest.deadline`` uses.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once ``now() >= when``."""
        ...

    async def sleep_until(self, when: float) -> None: ...


class RealClock:
    """The wall: ``time.monotonic()`` and the running loop's timers."""

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        return loop.call_later(max(0.0, when - time.monotonic()), callback)

    async def sleep_until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that only moves when a test says so.

    ``await clock.advance(dt)`` fires due timers in time order and lets the event loop run
    between them, so cascades (a timer wakes a waiter, which starts a request, which arms a
    timeout) settle as they would in real time, without any real waiting.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _ManualTimer(when, callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    async def sleep_until(self, when: float) -> None:
        if when <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        handle = self.call_at(when, wake)
        try:
            await future
        finally:
            handle.cancel()

    @property
    def pending_timers(self) -> int:
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    async def settle(self, rounds: int = 30) -> None:
        """Let every ready task run until the loop has nothing more to do right now."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing timers as their moment passes."""
        target = self._now + seconds
        await self.settle()
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
            await self.settle()
        self._now = target
        await self.settle()

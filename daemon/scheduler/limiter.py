"""Client-side rate limits for one quota (an API key at one URL).

Three gates in one object: requests per minute, tokens per minute (an estimate taken
before sending, corrected with the usage the server reports) and concurrent requests.
Unlike aiolimiter's leaky bucket, the minute limits are a sliding-window log, so no
60-second window ever holds more than the limit (a leaky bucket lets a full burst through
and then keeps draining, up to twice the limit in the first minute), and waiters are
served strictly by (priority, arrival): a large request is never starved by small ones.

A waiter that is cancelled takes nothing, and a permit released without having been sent
gives its budget back, so superseded keystroke requests never spend the user's quota.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from dataclasses import dataclass

from anyfill.daemon.scheduler.clock import Clock, TimerHandle

PRIORITY_RANK: dict[str, int] = {"interactive": 0, "prefetch": 1, "batch": 2}

WINDOW_S = 60.0


@dataclass(frozen=True)
class LimitSpec:
    """The limits of one quota; 0 means unlimited."""

    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    max_concurrent: int = 0

    def strictest(self, other: LimitSpec) -> LimitSpec:
        """Two backends sharing a quota: each limit is the stricter one that is set."""

        def pick(a: int, b: int) -> int:
            return min(x for x in (a, b) if x) if (a or b) else 0

        return LimitSpec(
            pick(self.requests_per_minute, other.requests_per_minute),
            pick(self.tokens_per_minute, other.tokens_per_minute),
            pick(self.max_concurrent, other.max_concurrent),
        )


class DeadlinePassed(Exception):
    """The waiter's deadline came before the limiter could admit it."""


class _Entry:
    __slots__ = ("amount", "time")

    def __init__(self, time: float, amount: int) -> None:
        self.time = time
        self.amount = amount


class _WindowLog:
    """Amounts admitted in the last ``window`` seconds: entries with ``time + window > now``."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self.total = 0
        self._entries: deque[_Entry] = deque()

    def _prune(self, now: float) -> None:
        # ``time + window <= now`` (not ``time <= now - window``): the same float arithmetic
        # as the admission time below, so an entry expires exactly when it says it will.
        window = self.window
        entries = self._entries
        while entries and entries[0].time + window <= now:
            self.total -= entries.popleft().amount

    def admissible_at(self, now: float, amount: int) -> float:
        """The earliest time ``amount`` fits (``now`` when it fits already)."""
        self._prune(now)
        amount = min(amount, self.limit)
        if self.total + amount <= self.limit:
            return now
        # Walk the oldest entries until enough budget would have expired.
        excess = self.total + amount - self.limit
        for entry in self._entries:
            excess -= entry.amount
            if excess <= 0:
                return entry.time + self.window
        return now  # unreachable: the entries sum to total >= excess

    def add(self, now: float, amount: int) -> _Entry:
        entry = _Entry(now, min(amount, self.limit))
        self._entries.append(entry)
        self.total += entry.amount
        return entry

    def adjust(self, entry: _Entry, amount: int, now: float) -> None:
        """Replace an admitted amount (a correction or a refund) while it is still counted."""
        self._prune(now)
        if entry.time + self.window > now:
            self.total += amount - entry.amount
        entry.amount = amount


class Permit:
    """The right to send one request; release it when the request ends."""

    __slots__ = ("_limiter", "_released", "_request_entry", "_token_entry", "sent")

    def __init__(
        self, limiter: Limiter, request_entry: _Entry | None, token_entry: _Entry | None
    ) -> None:
        self._limiter = limiter
        self._request_entry = request_entry
        self._token_entry = token_entry
        self._released = False
        self.sent = False
        """Set once the request went out; an unsent permit's budget is refunded."""

    def mark_sent(self, now: float) -> None:
        """The request goes out now: count it in the windows from this moment.

        Admission and the first byte on the wire can be apart when the event loop is busy
        (a burst of admitted requests is written one after another); counting from the
        send keeps every window the *server* sees within the limit. Entries may then sit
        slightly out of order in the log, which only makes the limiter more careful.
        """
        self.sent = True
        for entry in (self._request_entry, self._token_entry):
            if entry is not None and now > entry.time:
                entry.time = now

    def correct_tokens(self, actual: int) -> None:
        """The server reported what the request really cost."""
        if self._token_entry is not None and self._limiter.tokens is not None:
            self._limiter.tokens.adjust(self._token_entry, actual, self._limiter.clock.now())
            self._limiter._pump()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._limiter._release(self)


class _Waiter:
    __slots__ = ("future", "tokens")

    def __init__(self, future: asyncio.Future[Permit], tokens: int) -> None:
        self.future = future
        self.tokens = tokens


class Limiter:
    """Requests/minute, tokens/minute and concurrency for one quota key."""

    def __init__(self, spec: LimitSpec, clock: Clock, *, window: float = WINDOW_S) -> None:
        self.clock = clock
        self.spec = spec
        self.window = window
        self.requests = (
            _WindowLog(spec.requests_per_minute, window) if spec.requests_per_minute else None
        )
        self.tokens = _WindowLog(spec.tokens_per_minute, window) if spec.tokens_per_minute else None
        self.in_flight = 0
        self._waiters: list[tuple[int, int, _Waiter]] = []
        self._seq = itertools.count()
        self._timer: TimerHandle | None = None
        self._timer_at = 0.0

    def reshape(self, spec: LimitSpec) -> None:
        """New limits from now on; what the windows already hold still counts against them
        (a worker pool's share changes when a worker joins or leaves)."""
        self.spec = spec
        for name, limit in (
            ("requests", spec.requests_per_minute),
            ("tokens", spec.tokens_per_minute),
        ):
            window_log: _WindowLog | None = getattr(self, name)
            if not limit:
                setattr(self, name, None)
            elif window_log is None:
                setattr(self, name, _WindowLog(limit, self.window))
            else:
                window_log.limit = limit
        self._pump()

    @property
    def queued(self) -> int:
        return sum(1 for _, _, waiter in self._waiters if not waiter.future.done())

    def _ready_at(self, now: float, tokens: int) -> float | None:
        """When a request of ``tokens`` could start: now, later, or None (concurrency)."""
        if self.spec.max_concurrent and self.in_flight >= self.spec.max_concurrent:
            return None
        at = now
        if self.requests is not None:
            at = max(at, self.requests.admissible_at(now, 1))
        if self.tokens is not None:
            at = max(at, self.tokens.admissible_at(now, tokens))
        return at

    def _admit(self, now: float, tokens: int) -> Permit:
        self.in_flight += 1
        request_entry = self.requests.add(now, 1) if self.requests is not None else None
        token_entry = self.tokens.add(now, tokens) if self.tokens is not None else None
        return Permit(self, request_entry, token_entry)

    def try_acquire(self, tokens: int = 0) -> Permit | None:
        """A permit at once when nobody waits and every gate is open; else None."""
        if self._waiters:
            return None
        now = self.clock.now()
        if self._ready_at(now, tokens) != now:
            return None
        return self._admit(now, tokens)

    async def acquire(
        self, priority: str = "interactive", tokens: int = 0, deadline: float | None = None
    ) -> Permit:
        """Wait for a permit in (priority, arrival) order.

        Raises :class:`DeadlinePassed` when ``deadline`` (clock time) comes first.
        """
        permit = self.try_acquire(tokens)
        if permit is not None:
            return permit
        future: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(future, tokens)
        heapq.heappush(self._waiters, (PRIORITY_RANK.get(priority, 1), next(self._seq), waiter))
        deadline_timer: TimerHandle | None = None
        if deadline is not None:

            def expire() -> None:
                if not future.done():
                    future.set_exception(DeadlinePassed())
                    self._pump()

            deadline_timer = self.clock.call_at(deadline, expire)
        self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().release()  # admitted in the same instant: give it back
            else:
                future.cancel()
            self._pump()
            raise
        finally:
            if deadline_timer is not None:
                deadline_timer.cancel()

    def _release(self, permit: Permit) -> None:
        self.in_flight -= 1
        if not permit.sent:
            now = self.clock.now()
            if permit._request_entry is not None and self.requests is not None:
                self.requests.adjust(permit._request_entry, 0, now)
            if permit._token_entry is not None and self.tokens is not None:
                self.tokens.adjust(permit._token_entry, 0, now)
        self._pump()

    def _pump(self) -> None:
        """Admit waiters from the head of the queue while the gates allow."""
        waiters = self._waiters
        while waiters:
            waiter = waiters[0][2]
            if waiter.future.done():
                heapq.heappop(waiters)
                continue
            now = self.clock.now()
            at = self._ready_at(now, waiter.tokens)
            if at is None:
                return  # a release will pump again
            if at <= now:
                heapq.heappop(waiters)
                waiter.future.set_result(self._admit(now, waiter.tokens))
                continue
            self._arm(at)
            return

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at

        def fire() -> None:
            self._timer = None
            self._pump()

        self._timer = self.clock.call_at(at, fire)

"""Patience for work that runs unattended: a request that waits out its backend's "later"
instead of failing (``anyfill complete --jsonl``, ``anyfill eval``)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace

from anyfill.daemon.completion import Completion, CompletionRequest
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import AnyfillError, BackendError, RateLimited

__all__ = [
    "BATCH_ATTEMPTS",
    "BATCH_PATIENCE_S",
    "MAX_BATCH_CONCURRENCY",
    "BatchRateLimited",
    "RatePacer",
    "complete_patiently",
]

#: Requests of one batch in flight at once, whatever the backends' limits allow.
MAX_BATCH_CONCURRENCY = 16
#: How long one request keeps asking a backend that answers "later" (5xx, resets).
BATCH_PATIENCE_S = 120.0
#: Tries of a line whose backend failed (5xx, a reset).
BATCH_ATTEMPTS = 4
#: A rate-limited line gives up after this long or this many requests, says "rate limited"
#: and the batch goes on: a server that answers every request with 429 costs half a minute
#: for the first line, not two minutes a line (or a dozen requests a second).
RATE_LIMIT_WAIT_S = 30.0
RATE_LIMIT_TRIES = 4
#: The least pause after a 429, doubling with each one in a row, whatever the server said:
#: ``Retry-After: 0`` answered by another 429 is no reason to ask again at once.
RATE_LIMIT_PAUSE_S = 1.0


class RatePacer:
    """One batch's word on a rate-limiting backend, shared by its lines: after a 429 no line
    sends before the pause ends, so the request rate stays bounded however many lines
    wait; once a line gave up, each next line is asked at most once, and is skipped at once
    while a pause runs, until a line is answered again."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.not_before = 0.0
        self.paused_at = float("-inf")
        self.in_a_row = 0
        self.gave_up = False

    def now(self) -> float:
        return self._clock()

    def pause(self, asked_s: float | None, sent_at: float) -> None:
        """A 429 came back for a request sent at ``sent_at``: no line sends before the pause
        ends. The lines that were in flight together learn of one 429 (the scheduler's
        cooldown fails them at once): only a request sent after the last pause began makes
        the next pause longer."""
        now = self._clock()
        if sent_at >= self.paused_at:
            self.in_a_row += 1
            least = RATE_LIMIT_PAUSE_S * 2 ** min(self.in_a_row - 1, 5)
            wait = max(least, asked_s or 0.0) + random.uniform(0, 0.25)
            self.paused_at = now
        else:
            wait = asked_s or 0.0
        self.not_before = max(self.not_before, now + wait)

    def answered(self) -> None:
        self.in_a_row = 0
        self.gave_up = False

    def wait_s(self) -> float:
        return max(0.0, self.not_before - self._clock())


class BatchRateLimited(AnyfillError):
    """A batch line gave up on a backend that kept answering 429."""


async def complete_patiently(
    engine: Engine,
    request: CompletionRequest,
    sleep: Callable[[float], Awaitable[None]],
    pacer: RatePacer | None = None,
) -> Completion:
    """A batch line waits for its backends instead of failing, within bounds. A rate limit
    (the server's 429, or the pause it started) is waited out with the batch's
    :class:`RatePacer`, at most ``RATE_LIMIT_WAIT_S`` and ``RATE_LIMIT_TRIES`` requests
    (one once an earlier line gave up); another retryable failure is tried again after a
    short backoff, ``BATCH_ATTEMPTS`` times at most, within ``BATCH_PATIENCE_S``."""
    loop = asyncio.get_running_loop()
    pacer = pacer or RatePacer(loop.time)
    started = loop.time()
    failures = 0
    limited: list[RateLimited] = []

    def rate_limited(why: str) -> BatchRateLimited:
        pacer.gave_up = True
        last = f" ({limited[-1]})" if limited else ""
        return BatchRateLimited(f"rate limited{last}: {why}; went on to the next line")

    for attempt in itertools.count(1):
        wait = pacer.wait_s()
        if wait > 0:
            if pacer.gave_up:
                raise rate_limited(f"skipped while the backend asks to wait ({wait:.0f} s more)")
            if loop.time() + wait > started + RATE_LIMIT_WAIT_S:
                raise rate_limited(
                    f"gave up after {loop.time() - started:.0f} s (a line waits at most "
                    f"{RATE_LIMIT_WAIT_S:.0f} s)"
                )
            await sleep(wait)
        sent_at = pacer.now()
        try:
            done = await engine.complete(replace(request, id=f"{request.id}.{attempt}"))
        except RateLimited as exc:
            limited.append(exc)
            pacer.pause(exc.retry_after, sent_at)
            tries = 1 if pacer.gave_up else RATE_LIMIT_TRIES
            if len(limited) >= tries:
                raise rate_limited(f"gave up after {len(limited)} tries") from exc
        except BackendError as exc:
            failures += 1
            wait = min(2.0, 0.25 * 2 ** (failures - 1))
            wait += random.uniform(0, 0.25)  # the lines that waited together spread out
            late = loop.time() + wait > started + BATCH_PATIENCE_S
            if not exc.retryable or failures >= BATCH_ATTEMPTS or late:
                raise
            await sleep(wait)
        else:
            pacer.answered()
            return done
    raise AssertionError("unreachable")

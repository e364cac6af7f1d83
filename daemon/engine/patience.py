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
from anyfill.daemon.errors import BackendError, RateLimited

__all__ = ["BATCH_ATTEMPTS", "BATCH_PATIENCE_S", "MAX_BATCH_CONCURRENCY", "complete_patiently"]

#: How long one request keeps asking a backend that answers "later" (429, 5xx, resets).
BATCH_PATIENCE_S = 120.0
#: Tries of a request whose backend failed (5xx, a reset); a rate limit only costs time.
BATCH_ATTEMPTS = 4
#: Requests of one batch in flight at once, whatever the backends' limits allow.
MAX_BATCH_CONCURRENCY = 16


async def complete_patiently(
    engine: Engine, request: CompletionRequest, sleep: Callable[[float], Awaitable[None]]
) -> Completion:
    """A batch request waits for its backends instead of failing. A rate limit (the
    server's 429, or the pause it started) is waited out as long as the server asked,
    within ``BATCH_PATIENCE_S``; another retryable failure is tried again after a short
    backoff, ``BATCH_ATTEMPTS`` times at most."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + BATCH_PATIENCE_S
    failures = 0
    for attempt in itertools.count(1):
        try:
            return await engine.complete(replace(request, id=f"{request.id}.{attempt}"))
        except BackendError as exc:
            if isinstance(exc, RateLimited):
                wait = exc.retry_after if exc.retry_after is not None else 1.0
            else:
                failures += 1
                wait = min(2.0, 0.25 * 2 ** (failures - 1))
            wait += random.uniform(0, 0.25)  # the requests that waited together spread out
            if not exc.retryable or failures >= BATCH_ATTEMPTS or loop.time() + wait > give_up:
                raise
            await sleep(wait)
    raise AssertionError("unreachable")

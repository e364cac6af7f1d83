"""P6: the rate limiter under 10x overload.

A limit of 50 requests per 1-second window (the per-minute limiter with a shorter window,
so the run takes seconds) gets 500 requests per second for 5 seconds, through the whole
scheduler and the real HTTP client to the stub. Measured: the most requests sent inside
any window (must not exceed the limit) and the share of the limit used while the load
lasted (goal: at least 95%).

Send times are taken where the scheduler hands a request to the backend, a few
microseconds after the limiter reads its clock, so windows are checked 1 ms shorter than
the limit's to absorb that. The stub's arrival times are shown too: they add the time the
stub process (on the same 2 cores) takes to read a burst, so they can bunch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from anyfill.bench.harness import (
    MAX_TOKENS,
    PREFIX,
    SUFFIX,
    Say,
    fim_request,
    machine,
    quiet,
    stub,
    stub_config,
)

LIMIT = 50
WINDOW_S = 1.0
OFFERED_PER_S = 10 * LIMIT
DURATION_S = 5.0
GRACE_S = 0.001


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest count of ``times`` inside any window [t, t + window)."""
    ordered = sorted(times)
    worst, start = 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] + window <= t:
            start += 1
        worst = max(worst, end - start + 1)
    return worst


async def _run(url: str) -> tuple[list[float], float, float]:
    from anyfill.config.model import Limits, RoutingConfig
    from anyfill.daemon.backends.base import Backend, FimPrompt, StreamObserver
    from anyfill.daemon.backends.http import make_client
    from anyfill.daemon.backends.registry import create_backend
    from anyfill.daemon.errors import RequestDropped
    from anyfill.daemon.scheduler import Scheduler

    config = stub_config(url, Limits(requests_per_minute=LIMIT, max_concurrent=64))
    client = make_client(config)
    real = create_backend(config, client, "sk-bench")
    sent: list[float] = []

    class Recorded(type(real)):  # type: ignore[misc]
        """The same backend; notes when the scheduler hands it a request."""

        def stream(
            self, prompt: FimPrompt, observer: StreamObserver | None = None
        ) -> AsyncIterator[str]:
            sent.append(time.monotonic())
            chunks: AsyncIterator[str] = super().stream(prompt, observer)
            return chunks

    backend: Backend = Recorded(config, client, "sk-bench")
    scheduler = Scheduler([backend], RoutingConfig(default=["stub"]), limit_window_s=WINDOW_S)
    prompt = FimPrompt(prefix=PREFIX, suffix=SUFFIX, max_tokens=MAX_TOKENS)

    async def one(index: int) -> None:
        request = fim_request(f"o{index}", app=f"w{index}")
        with contextlib.suppress(RequestDropped):
            async for _ in scheduler.dispatch(request, prompt):
                pass

    tasks = []
    started = time.monotonic()
    try:
        for index in range(int(OFFERED_PER_S * DURATION_S)):
            tasks.append(asyncio.create_task(one(index)))
            await asyncio.sleep(max(0.0, started + (index + 1) / OFFERED_PER_S - time.monotonic()))
        ended = time.monotonic()
    finally:
        await scheduler.aclose()  # the rest of the queue is dropped unsent
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()
    return sent, started, ended


def run(say: Say = quiet) -> str:
    with stub() as server:
        sent, started, ended = asyncio.run(_run(server.url))
        arrivals = server.stats()["arrivals"]
    during = [t for t in sent if started <= t < ended]
    allowed = LIMIT * (ended - started) / WINDOW_S
    say("  done")
    return "\n".join(
        [
            f"P6: limiter at {LIMIT} requests per {WINDOW_S:g} s window, offered "
            f"{OFFERED_PER_S}/s ({OFFERED_PER_S // LIMIT}x) for {DURATION_S:g} s",
            f"    machine: {machine()}",
            f"    requests offered: {int(OFFERED_PER_S * DURATION_S)}, sent: {len(sent)}",
            f"    most sent in any window: {most_in_any_window(sent, WINDOW_S - GRACE_S)} "
            f"(limit {LIMIT}); as the stub read them: "
            f"{most_in_any_window(arrivals, WINDOW_S - GRACE_S)}",
            f"    limit used while overloaded: {len(during)} of {allowed:.0f} "
            f"= {100 * len(during) / allowed:.1f}%",
        ]
    )

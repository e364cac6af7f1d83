"""P3: from a cancel in anyfill to the upstream socket being closed, as the server sees it.

The stub (another process) streams an endless answer, or holds the request in a long
"prefill" before any header, and records ``time.monotonic()`` when the client's connection
drops. anyfill cancels in three ways: ``Scheduler.cancel(id)`` mid-stream, a newer request
for the same target (latest wins) mid-stream, and ``cancel(id)`` before the first header.
The figure is the delay between the cancel call and the server noticing; the goal is a p99
of at most 2 ms. Raw httpx cancelling its task is measured alongside as the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

from anyfill.bench.harness import (
    MAX_TOKENS,
    PREFIX,
    SUFFIX,
    Say,
    Stub,
    fim_request,
    machine,
    openai_body,
    quantile,
    quiet,
    stub,
    stub_config,
)
from anyfill.daemon.heap import freeze_startup_objects


def _scheduler(url: str) -> tuple[Any, Any, Any]:
    from anyfill.config.model import RoutingConfig
    from anyfill.daemon.backends.base import FimPrompt
    from anyfill.daemon.backends.http import make_client
    from anyfill.daemon.backends.registry import create_backend
    from anyfill.daemon.scheduler import Scheduler

    config = stub_config(url)
    client = make_client(config)
    backend = create_backend(config, client, "sk-bench")
    scheduler = Scheduler([backend], RoutingConfig(default=["stub"]))
    return scheduler, client, FimPrompt(prefix=PREFIX, suffix=SUFFIX, max_tokens=MAX_TOKENS)


async def _arrived(server: Stub, count: int) -> None:
    """Wait until the stub has read ``count`` requests."""
    while len((await asyncio.to_thread(server.stats))["arrivals"]) < count:  # noqa: ASYNC110 - another process
        await asyncio.sleep(0.005)


async def _anyfill_samples(server: Stub, samples: int, how: str) -> list[float]:
    """Cancel times (monotonic) of ``samples`` requests cancelled the way ``how`` says."""
    from anyfill.daemon.completion import CompletionRequest, Text
    from anyfill.daemon.errors import RequestDropped

    scheduler, client, prompt = _scheduler(server.url)
    freeze_startup_objects()  # as the daemon does once it has started
    cancels: list[float] = []
    try:
        for index in range(samples):
            request = fim_request(f"{how}{index}", app="p3")
            first_text = asyncio.Event()

            async def consume(
                request: CompletionRequest = request, first_text: asyncio.Event = first_text
            ) -> None:
                async for event in scheduler.dispatch(request, prompt):
                    if isinstance(event, Text):
                        first_text.set()

            task = asyncio.create_task(consume())
            if how == "before-headers":
                await _arrived(server, index + 1)
            else:
                await first_text.wait()
            if how == "supersede":
                newer = fim_request(f"new{index}", app="p3")
                cancels.append(time.monotonic())
                replacement = scheduler.dispatch(newer, prompt)
                await replacement.__anext__()  # registers the newer request: the old one drops
                await replacement.aclose()
            else:
                cancels.append(time.monotonic())
                scheduler.cancel(request.id)
            with contextlib.suppress(RequestDropped):
                await task
            await asyncio.sleep(0.01)
    finally:
        await scheduler.aclose()
        await client.aclose()
    return cancels


async def _httpx_samples(server: Stub, samples: int) -> list[float]:
    import httpx

    cancels: list[float] = []
    async with httpx.AsyncClient() as client:
        freeze_startup_objects()  # the same heap as anyfill's cases
        for _ in range(samples):
            first = asyncio.Event()

            async def consume(first: asyncio.Event = first) -> None:
                async with client.stream(
                    "POST", f"{server.url}/v1/completions", json=openai_body()
                ) as response:
                    async for _ in response.aiter_lines():
                        first.set()

            task = asyncio.create_task(consume())
            await first.wait()
            cancels.append(time.monotonic())
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.01)
    return cancels


def _delays(server: Stub, cancels: list[float]) -> list[float]:
    deadline = time.monotonic() + 5
    disconnects: list[float] = []
    while time.monotonic() < deadline:
        disconnects = server.stats()["disconnects"]
        if len(disconnects) >= len(cancels):
            break
        time.sleep(0.05)
    if len(disconnects) < len(cancels):
        raise RuntimeError(
            f"the stub saw {len(disconnects)} disconnects for {len(cancels)} cancels: "
            "a cancelled request kept its connection open"
        )
    return [(gone - cancel) * 1e3 for gone, cancel in zip(disconnects, cancels, strict=False)]


Case = Callable[[Stub], Coroutine[Any, Any, list[float]]]


def run(samples: int = 100, say: Say = quiet) -> str:
    lines = [
        "P3: cancel -> upstream socket closed, as the stub server sees it (ms)",
        f"    machine: {machine()}",
        f"    {'case':<44} {'p50':>7} {'p99':>7} {'max':>7}  samples",
    ]
    streaming = ("--chunks", "1000000", "--chunk-delay-ms", "5")
    cases: list[tuple[str, tuple[str, ...], Case]] = [
        (
            "anyfill cancel(id) while streaming",
            streaming,
            lambda server: _anyfill_samples(server, samples, "stream"),
        ),
        (
            "anyfill newer request, same target",
            streaming,
            lambda server: _anyfill_samples(server, samples, "supersede"),
        ),
        (
            "anyfill cancel(id) before the first header",
            ("--base-ms", "2000", "--chunk-delay-ms", "5"),
            lambda server: _anyfill_samples(server, samples, "before-headers"),
        ),
        (
            "raw httpx task.cancel() (reference)",
            streaming,
            lambda server: _httpx_samples(server, samples),
        ),
    ]
    for name, args, case in cases:
        with stub(*args) as server:
            cancels = asyncio.run(case(server))
            delays = _delays(server, cancels)
        lines.append(
            f"    {name:<44} {quantile(delays, 0.5):7.2f} {quantile(delays, 0.99):7.2f} "
            f"{max(delays):7.2f}  {len(delays)}"
        )
        say(f"  {name}: done")
    return "\n".join(lines)

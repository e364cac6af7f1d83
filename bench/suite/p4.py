"""P4: batching. 32 concurrent requests for a backend that takes a prompt list.

The stub (another process) charges what a small local server charges: each HTTP request
waits for one of 4 inference slots, then costs 40 ms plus 2 ms per prompt it carries (the
fixed part: HTTP, tokenising, scheduling and the first decode steps, shared by a batch).
The same 32 requests go out one request each (batching off) and batched (priority
"batch", 4 ms window). Goal: at most 2 HTTP requests and at least 3x less wall time.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from anyfill.bench.harness import (
    MAX_TOKENS,
    PREFIX,
    SUFFIX,
    Say,
    fim_request,
    machine,
    median,
    quiet,
    stub,
    stub_config,
)

REQUESTS = 32
COST = ("--base-ms", "40", "--per-prompt-ms", "2", "--slots", "4")


async def _round(url: str, batched: bool) -> float:
    from anyfill.config.model import Limits, RoutingConfig
    from anyfill.daemon.backends.base import FimPrompt
    from anyfill.daemon.backends.http import make_client
    from anyfill.daemon.backends.registry import create_backend
    from anyfill.daemon.completion import Text
    from anyfill.daemon.scheduler import Scheduler

    config = stub_config(url, Limits(max_concurrent=REQUESTS))
    client = make_client(config)
    backend = create_backend(config, client, "sk-bench")
    priorities = frozenset({"batch"}) if batched else frozenset()
    scheduler = Scheduler([backend], RoutingConfig(default=["stub"]), batch_priorities=priorities)

    async def one(index: int) -> str:
        request = fim_request(f"q{index}", app=f"doc{index}", priority="batch")
        prompt = FimPrompt(prefix=f"{PREFIX}# {index}\n", suffix=SUFFIX, max_tokens=MAX_TOKENS)
        parts = [e.chunk async for e in scheduler.dispatch(request, prompt) if isinstance(e, Text)]
        return "".join(parts)

    try:
        started = time.perf_counter()
        texts = await asyncio.gather(*(one(i) for i in range(REQUESTS)))
        elapsed = time.perf_counter() - started
    finally:
        await scheduler.aclose()
        await client.aclose()
    if not all(texts):
        raise RuntimeError("a request got no text")
    return elapsed


def run(reps: int = 5, say: Say = quiet) -> str:
    rows: dict[str, dict[str, list[Any]]] = {"one request each": {}, "batched": {}}
    with stub(*COST) as server:
        for rep in range(reps):
            for name, batched in (("one request each", False), ("batched", True)):
                server.reset()
                wall = asyncio.run(_round(server.url, batched))
                stats = server.stats()
                row = rows[name]
                row.setdefault("wall", []).append(wall * 1e3)
                row.setdefault("requests", []).append(stats["requests"])
                row.setdefault("sizes", []).append(stats["batch_sizes"])
            say(f"  repetition {rep + 1}/{reps} done")
    base = median(rows["one request each"]["wall"])
    lines = [
        f"P4: {REQUESTS} concurrent requests to a prompt-list backend (stub: 4 slots, "
        "40 ms per HTTP request + 2 ms per prompt)",
        f"    machine: {machine()}",
        f"    {'mode':<18} {'wall p50':>10} {'speed-up':>9} {'HTTP requests':>14}"
        "  prompts per request",
    ]
    for name, row in rows.items():
        wall = median(row["wall"])
        sizes = collections.Counter(size for sizes in row["sizes"] for size in sizes)
        shape = ", ".join(f"{n // len(row['sizes'])} x {size}" for size, n in sorted(sizes.items()))
        lines.append(
            f"    {name:<18} {wall:8.1f}ms {base / wall:8.2f}x {max(row['requests']):>14}  {shape}"
        )
    return "\n".join(lines)

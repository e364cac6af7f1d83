"""10,000 requests or more with random cancels, supersedes, 429s and dropped connections
leave no pending task and no open socket behind."""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import random

import pytest

from anyfill.config.model import Limits
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.errors import BackendError, RequestDropped
from tests.integration.scheduler.helpers import collect, openai_config, prompt, scheduler_for
from tests.servers.fixtures import StartServer
from tests.servers.openai import OpenAI
from tests.servers.script import Reply

REQUESTS = 10_000
CHAOS_WANTED = 100
"""429s and dropped connections the primary must have answered before the soak ends."""
REQUESTS_CAP = 50_000


class Chaos(OpenAI):
    """Answers at random: text, a 429 with retry-after-ms, a reset mid-stream, a slow stream."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.kinds: collections.Counter[str] = collections.Counter()

    def next_reply(self) -> Reply:
        roll = self.rng.random()
        if roll < 0.10:
            self.kinds["429"] += 1
            return Reply(error="rate_limit", retry_after_ms="15")
        if roll < 0.20:
            self.kinds["reset"] += 1
            return Reply(text="one two three", drop_after=1)
        if roll < 0.30:
            self.kinds["slow"] += 1
            return Reply(chunks=["slow "] * 8, chunk_delay_s=0.004)
        self.kinds["ok"] += 1
        return Reply(text="fine")


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.slow
async def test_ten_thousand_requests_leave_nothing_behind(loopback: StartServer) -> None:
    chaos = Chaos(seed=5)
    primary = await loopback(chaos)
    spare = await loopback(OpenAI(default=Reply(text="spare")))
    baseline_sockets = open_sockets()
    baseline_tasks = asyncio.all_tasks()
    rng = random.Random(7)
    outcomes: collections.Counter[str] = collections.Counter()
    configs = [
        openai_config("primary", primary.url, limits=Limits(max_concurrent=12)),
        openai_config("spare", spare.url, limits=Limits(max_concurrent=12)),
    ]
    async with scheduler_for(configs) as scheduler:
        numbers = itertools.count()
        issued = 0

        def enough(i: int) -> bool:
            """How much of the traffic reaches the chaotic primary depends on the clock
            (a dropped connection cools it for 1 s and more while the spare answers: 637
            to 2,600 of 10,000 requests here, once only 75 429s), so the soak goes on
            until it has answered enough of both failures, not for a set time."""
            chaos_met = min(chaos.kinds["429"], chaos.kinds["reset"]) >= CHAOS_WANTED
            return i >= REQUESTS_CAP or (i >= REQUESTS and chaos_met)

        async def worker() -> None:
            nonlocal issued
            for i in numbers:
                if enough(i):
                    return
                issued += 1
                request = CompletionRequest(
                    context=Context(prefix=f"x{i} = ", suffix="\n", app=f"t{rng.randrange(1000)}"),
                    id=f"s{i}",
                    priority=rng.choice(["interactive", "interactive", "prefetch"]),
                )
                task = asyncio.create_task(collect(scheduler, request, prompt(f"x{i} = ")))
                roll = rng.random()
                if roll < 0.25:
                    await asyncio.sleep(rng.random() * 0.006)
                    if roll < 0.2:
                        scheduler.cancel(request.id)
                    else:
                        task.cancel()
                try:
                    await task
                    outcomes["ok"] += 1
                except RequestDropped as exc:
                    outcomes["superseded" if "superseded" in exc.reason else "dropped"] += 1
                except asyncio.CancelledError:
                    outcomes["task cancelled"] += 1
                except BackendError as exc:
                    outcomes[type(exc).__name__] += 1

        await asyncio.gather(*(worker() for _ in range(48)))
        assert scheduler.live_requests == 0
        assert scheduler.background_tasks == 0
        for lane in scheduler._lanes.values():  # the quota state: nothing still counted in flight
            assert lane.limiter.in_flight == 0
            assert lane.limiter.queued == 0
    # The clients are closed: every connection must be gone on both sides.
    for _ in range(200):  # the server's connection handlers end once they see EOF
        if not primary._tasks and not spare._tasks:
            break
        await asyncio.sleep(0.025)
    assert not primary._tasks, f"{len(primary._tasks)} server connections still open"
    assert not spare._tasks, f"{len(spare._tasks)} server connections still open"
    await asyncio.sleep(0.05)
    assert open_sockets() == baseline_sockets
    assert asyncio.all_tasks() == baseline_tasks
    print(f"soak: {issued} requests, outcomes {dict(outcomes)}; server replies {dict(chaos.kinds)}")
    assert sum(outcomes.values()) == issued
    assert outcomes["ok"] > issued // 2, outcomes
    assert outcomes["dropped"] > 0
    assert outcomes["task cancelled"] > 0
    assert outcomes["superseded"] > 0
    assert chaos.kinds["429"] >= CHAOS_WANTED, f"{issued} requests"
    assert chaos.kinds["reset"] >= CHAOS_WANTED, f"{issued} requests"
    assert len(primary.disconnects) > 0

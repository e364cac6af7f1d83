"""Hedging: when the first backend is slow to produce text, start the next one too.

With ``routing.hedge_after_ms`` set, a request whose backend has sent no text after that
long also starts the next backend of the chain (and so on); the first to produce text
wins and the others are cancelled at once, closing their sockets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

from anyfill.daemon.backends.base import FimPrompt
from anyfill.daemon.completion import Attempt, DispatchEvent, Finished, Planned
from anyfill.daemon.errors import BackendError
from anyfill.daemon.scheduler.attempt import Attempts
from anyfill.daemon.scheduler.clock import TimerHandle
from anyfill.daemon.scheduler.state import Lane, Runner, Ticket, falls_back

AttemptStarter = Callable[..., AsyncGenerator[DispatchEvent, None]]
"""Starts one attempt: ``(ticket, runner, lane, prompt, *, announce)`` (the scheduler's
choice between a streamed and a batched attempt)."""

log = logging.getLogger("anyfill.daemon.scheduler")

_HEDGE, _EVENT, _FAILED = 0, 1, 2


async def hedged(  # noqa: PLR0915 - one request's life reads best in one place
    attempts: Attempts,
    attempt: AttemptStarter,
    ticket: Ticket,
    lanes: list[Lane],
    prompt: FimPrompt,
) -> AsyncGenerator[DispatchEvent, None]:
    request = ticket.request
    clock = attempts.clock
    runner = ticket.runner
    queue: asyncio.Queue[tuple[int, Lane | None, Any]] = asyncio.Queue()
    hedge_s = attempts.routing.hedge_after_ms / 1000.0
    failures: list[BackendError] = []
    candidates = attempts.by_health(request, lanes, failures)
    if not candidates:
        raise attempts.all_failed(failures)
    running: dict[str, asyncio.Task[None]] = {}
    next_index = 0
    hedge_timer: TimerHandle | None = None
    winner: Lane | None = None
    finished = False
    buffered: list[DispatchEvent] = []

    def start() -> None:
        nonlocal next_index, hedge_timer
        lane = candidates[next_index]
        next_index += 1
        running[lane.name] = asyncio.create_task(
            hedge_arm(attempt, ticket, lane, prompt, queue), name=f"hedge:{lane.name}"
        )
        if hedge_timer is not None:
            hedge_timer.cancel()
            hedge_timer = None
        if next_index < len(candidates):
            hedge_timer = clock.call_at(
                clock.now() + hedge_s, lambda: queue.put_nowait((_HEDGE, None, None))
            )

    try:
        start()
        while True:
            kind, lane, payload = await runner.wait(queue.get())
            if kind == _HEDGE:
                hedge_timer = None
                if winner is None and next_index < len(candidates):
                    log.debug("request %s: no first token yet, hedging", request.id)
                    start()
                continue
            assert lane is not None
            if kind == _FAILED:
                running.pop(lane.name, None)
                error: BaseException = payload
                if not isinstance(error, BackendError) or not falls_back(error):
                    raise error
                failures.append(error)
                if winner is lane:
                    winner = None
                if winner is None and not running:
                    if next_index < len(candidates) and attempts.routing.fallback:
                        buffered.clear()
                        start()
                    else:
                        raise attempts.all_failed(failures)
                continue
            if winner is None:
                if isinstance(payload, Planned):
                    buffered.append(payload)  # only the winner's plan is reported
                    continue
                winner = lane
                if hedge_timer is not None:
                    hedge_timer.cancel()
                    hedge_timer = None
                for name, task in list(running.items()):
                    if name != lane.name:
                        ticket.losers.add(name)
                        task.cancel()
                yield Attempt(lane.name)
                ticket.check()
                for event in buffered:
                    if event.__class__ is Planned:
                        yield event
                buffered.clear()
            if lane is winner:
                yield payload
                ticket.check()
                if isinstance(payload, Finished):
                    finished = True
                    return
    finally:
        if hedge_timer is not None:
            hedge_timer.cancel()
        tasks = list(running.values())
        for name, task in running.items():
            if not (finished and winner is not None and name == winner.name):
                task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def hedge_arm(
    attempt: AttemptStarter,
    ticket: Ticket,
    lane: Lane,
    prompt: FimPrompt,
    queue: asyncio.Queue[tuple[int, Lane | None, Any]],
) -> None:
    runner = Runner()
    try:
        async with aclosing(attempt(ticket, runner, lane, prompt, announce=False)) as events:
            async for event in events:
                queue.put_nowait((_EVENT, lane, event))
    except Exception as error:  # noqa: BLE001 - handed to the consumer, who raises it
        queue.put_nowait((_FAILED, lane, error))

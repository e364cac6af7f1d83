"""One attempt: a request sent to one backend, and the bookkeeping every attempt shares.

``Attempts`` is what the scheduler, ``batching`` and ``hedging`` all use: it records each
attempt's outcome (metrics on the bus), cools a backend down after a failure and announces
the end of the cooldown, orders a chain by health, and runs one streamed attempt
(``streamed``): wait for the quota's permit, send, relay the text, close the HTTP response
when the attempt ends, whatever ends it. It imports neither the scheduler nor the
strategies built on it, so they form no cycle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from anyfill.config.model import RoutingConfig
from anyfill.daemon.backends.base import FimPrompt, Usage
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import (
    Attempt,
    CompletionRequest,
    DispatchEvent,
    Finished,
    Planned,
    Text,
)
from anyfill.daemon.errors import (
    EVERY_BACKEND_FAILED,
    AnyfillError,
    BackendError,
    BackendUnavailable,
    RateLimited,
    RequestDropped,
    Told,
)
from anyfill.daemon.scheduler.cache import CompletionCache
from anyfill.daemon.scheduler.clock import Clock, TimerHandle
from anyfill.daemon.scheduler.events import AttemptFinished, CooldownChanged, Outcome, outcome_of
from anyfill.daemon.scheduler.feedback import RateFeedback
from anyfill.daemon.scheduler.limiter import DeadlinePassed, Permit
from anyfill.daemon.scheduler.metrics import Metrics
from anyfill.daemon.scheduler.state import (
    AttemptTimer,
    Lane,
    Observer,
    Runner,
    Ticket,
    estimate_tokens,
    map_foreign,
)

log = logging.getLogger("anyfill.daemon.scheduler.scheduler")


class Attempts:
    """The state attempts share: clock, bus, cache, metrics, cooldown timers, tasks."""

    def __init__(
        self,
        routing: RoutingConfig,
        clock: Clock,
        bus: EventBus | None,
        cache: CompletionCache,
        metrics: Metrics,
        *,
        batch_window_s: float,
        batch_max: int,
    ) -> None:
        self.routing = routing
        self.clock = clock
        self.bus = bus
        self.cache = cache
        self.metrics = metrics
        self.batch_window_s = batch_window_s
        self.batch_max = batch_max
        self.tasks: set[asyncio.Task[Any]] = set()
        """Background tasks (batches in flight), stopped by the scheduler's ``aclose``."""
        self.cooldown_timers: dict[str, TimerHandle] = {}

    def stop_cooldown_timers(self) -> None:
        for timer in self.cooldown_timers.values():
            timer.cancel()
        self.cooldown_timers.clear()

    def record(
        self,
        request_id: str,
        lane: Lane,
        outcome: Outcome,
        *,
        enqueued: float | None = None,
        sent: float | None = None,
        first: float | None = None,
        usage: Usage | None = None,
        reason: str = "",
        batched: int = 0,
    ) -> None:
        now = self.clock.now()
        prompt_tokens = (usage.prompt_tokens or 0) if usage else 0
        completion_tokens = (usage.completion_tokens or 0) if usage else 0
        self.metrics.record(
            AttemptFinished(
                request_id=request_id,
                backend=lane.name,
                outcome=outcome,
                queue_wait_ms=None if enqueued is None or sent is None else (sent - enqueued) * 1e3,
                first_token_ms=None if first is None or sent is None else (first - sent) * 1e3,
                total_ms=None if sent is None else (now - sent) * 1e3,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost=self.metrics.cost(lane.name, prompt_tokens, completion_tokens),
                reason=reason,
                batched=batched,
            )
        )

    def cool(self, lane: Lane, error: BackendError, feedback: RateFeedback | None) -> None:
        server_delay: float | None = None
        if isinstance(error, RateLimited) and error.retry_after is not None:
            server_delay = error.retry_after
        if feedback is not None and feedback.retry_after is not None:
            server_delay = max(server_delay or 0.0, feedback.retry_after)
        now = self.clock.now()
        delay = lane.health.fail(now, error, server_delay)
        log.info("backend %s cools down for %.2f s: %s", lane.name, delay, error)
        if self.bus is not None:
            self.bus.publish(
                CooldownChanged(
                    lane.name, True, lane.health.seconds_left(now), str(error), cause=Told.of(error)
                )
            )
            self.watch_cooldown(lane)

    def watch_cooldown(self, lane: Lane) -> None:
        """Publish the end of ``lane``'s cooldown when it comes: ``CooldownChanged`` is
        retained state for the tray and MQTT, so an end nobody announced would read as
        cooling forever."""
        old = self.cooldown_timers.pop(lane.name, None)
        if old is not None:
            old.cancel()
        self.cooldown_timers[lane.name] = self.clock.call_at(
            lane.health.cooling_until, lambda: self.cooldown_due(lane)
        )

    def cooldown_due(self, lane: Lane) -> None:
        if lane.health.cooling(self.clock.now()):  # extended meanwhile
            self.watch_cooldown(lane)
            return
        self.cooldown_over(lane)

    def cooldown_over(self, lane: Lane) -> None:
        """Announce that ``lane`` may be asked again, if a cooldown was announced."""
        timer = self.cooldown_timers.pop(lane.name, None)
        if timer is None:
            return
        timer.cancel()
        if self.bus is not None:
            self.bus.publish(CooldownChanged(lane.name, False))

    def succeeded(self, lane: Lane) -> None:
        """It answered: a soft cooldown ends now (``Health.succeed``). An answer that said
        its quota is used up (``Observer.on_response``) starts a hard one: announced here."""
        health = lane.health
        health.succeed()
        now = self.clock.now()
        if not health.cooling(now):
            if self.cooldown_timers:
                self.cooldown_over(lane)
        elif self.bus is not None and lane.name not in self.cooldown_timers:
            self.bus.publish(
                CooldownChanged(
                    lane.name,
                    True,
                    health.seconds_left(now),
                    health.reason,
                    cause=health.cause,
                )
            )
            self.watch_cooldown(lane)

    def cooling_error(self, lane: Lane) -> BackendError:
        health = lane.health
        left = health.seconds_left(self.clock.now())
        reason = health.reason_told(with_text=False)  # its text stands behind a placeholder
        error: BackendError
        if health.kind == "rate_limited":
            error = RateLimited(
                lane.name,
                f"'{lane.name}' is rate-limited for another {left:.1f} s ({reason})",
                retry_after=left,
            )
        else:
            error = BackendUnavailable(
                lane.name,
                f"'{lane.name}' is cooling down for another {left:.1f} s after: {reason}",
            )
        return error.hiding(reason, health.reason_told(with_text=True))

    def deadline_passed(self, ticket: Ticket, lane: Lane, waited_s: float) -> RequestDropped:
        reason = (
            f"past its deadline after {waited_s * 1e3:.0f} ms in the queue for '{lane.name}'"
            if waited_s > 0
            else "past its deadline before it could be sent"
        )
        ticket.drop_reason, ticket.drop_outcome = reason, "deadline"
        return RequestDropped(ticket.request.id, reason)

    def by_health(
        self, request: CompletionRequest, lanes: list[Lane], failures: list[BackendError]
    ) -> list[Lane]:
        """Healthy lanes in chain order, then softly cooling ones as a last resort.

        Hard-cooling lanes are left out; their "wait N s" error joins ``failures``.
        """
        now = self.clock.now()
        healthy: list[Lane] = []
        soft: list[Lane] = []
        for lane in lanes:
            if lane.health.blocked(now):
                failures.append(self.cooling_error(lane))
                self.record(request.id, lane, "cooling", reason=str(failures[-1]))
            elif lane.health.cooling(now):
                soft.append(lane)
            else:
                healthy.append(lane)
        return healthy + soft

    def all_failed(self, failures: list[BackendError]) -> BackendError:
        last = failures[-1]
        if len(failures) > 1:
            last.add_note(EVERY_BACKEND_FAILED + "; ".join(f"{f.backend}: {f}" for f in failures))
        return last

    async def acquire(
        self, ticket: Ticket, runner: Runner, lane: Lane, tokens: int, enqueued: float
    ) -> Permit:
        permit = lane.limiter.try_acquire(tokens)
        if permit is not None:
            return permit
        request = ticket.request
        try:
            return await runner.wait(
                lane.limiter.acquire(request.priority, tokens, request.deadline)
            )
        except DeadlinePassed:
            error = self.deadline_passed(ticket, lane, self.clock.now() - enqueued)
            self.record(request.id, lane, "deadline", reason=error.reason)
            raise error from None

    async def streamed(  # noqa: PLR0915 - one request's life reads best in one place
        self,
        ticket: Ticket,
        runner: Runner,
        lane: Lane,
        prompt: FimPrompt,
        *,
        announce: bool,
    ) -> AsyncGenerator[DispatchEvent, None]:
        request = ticket.request
        clock = self.clock
        enqueued = clock.now()
        permit = await self.acquire(ticket, runner, lane, estimate_tokens(prompt), enqueued)
        outcome: Outcome = "error"
        reason = ""
        sent: float | None = None
        first: float | None = None
        observer = Observer(lane.health, permit, clock.now)
        stream: AsyncIterator[str] | None = None
        timer: AttemptTimer | None = None
        try:
            now = clock.now()
            if request.deadline is not None and now >= request.deadline:
                outcome = "deadline"
                raise self.deadline_passed(ticket, lane, now - enqueued)
            if lane.health.blocked(now):  # the server asked for a pause while we waited
                outcome = "cooling"
                raise self.cooling_error(lane)
            ticket.check()
            permit.sent = True  # from here on the attempt counts, even if it fails at once
            timeouts = lane.config.timeouts
            if announce:
                yield Attempt(lane.name)
                ticket.check()
            sent = clock.now()
            permit.mark_sent(sent)
            stream = lane.backend.stream(prompt, observer)
            timer = AttemptTimer(
                clock,
                runner,
                lane.name,
                sent,
                first_s=timeouts.first_token_s,
                total_s=timeouts.total_s,
            )
            planned = False
            pieces: list[str] = []
            anext = stream.__anext__
            while True:
                try:
                    chunk = await runner.wait(anext())
                except StopAsyncIteration:
                    break
                if not planned and observer.plan is not None:
                    planned = True
                    yield Planned(observer.plan)
                    ticket.check()
                if first is None:
                    first = clock.now()
                    timer.got_text = True
                pieces.append(chunk)
                yield Text(chunk)
                ticket.check()
            if not planned and observer.plan is not None:
                yield Planned(observer.plan)
                ticket.check()
            outcome = "ok"
            self.succeeded(lane)
            text = "".join(pieces)
            if text:
                self.cache.put(
                    lane.cache_key,
                    prompt,
                    text,
                    observer.plan,
                    observer.usage,
                    ahead=request.priority != "interactive",
                )
            yield Finished(observer.usage or Usage())
        except RequestDropped as error:
            outcome = ticket.drop_outcome if ticket.drop_reason else "deadline"
            reason = error.reason
            raise
        except GeneratorExit:
            outcome = ticket.drop_outcome if ticket.drop_reason else "cancelled"
            raise
        except asyncio.CancelledError:
            outcome = "hedge_lost" if lane.name in ticket.losers else "cancelled"
            raise
        except AnyfillError as error:
            if not isinstance(error, BackendError):
                raise
            if outcome != "cooling":
                outcome = outcome_of(error)
                reason = str(error)
                if error.retryable:
                    self.cool(lane, error, observer.feedback)
            raise
        except Exception as foreign:
            mapped = map_foreign(lane.name, foreign)
            outcome, reason = outcome_of(mapped), str(mapped)
            if mapped.retryable:
                self.cool(lane, mapped, observer.feedback)
            raise mapped from foreign
        finally:
            if timer is not None:
                timer.cancel()
            if not isinstance(runner.error, RequestDropped):
                runner.error = None  # a timeout that fired as the attempt ended is moot
            try:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()  # closes the HTTP response, hence the socket
            finally:
                permit.release()
                self.record(
                    request.id,
                    lane,
                    outcome,
                    enqueued=enqueued,
                    sent=sent,
                    first=first,
                    usage=observer.usage,
                    reason=reason,
                )


__all__ = ["Attempts"]

"""The request queue: every completion passes through one :class:`Scheduler`.

It implements the ``Dispatcher`` protocol of ``anyfill.daemon.completion``:

- **latest wins**: a new interactive or prefetch request for the same ``Context.target``
  supersedes older ones of equal or lower priority. Unsent, they are never sent; streaming,
  the consumer's await is interrupted, which closes the backend's HTTP/1.1 response and so
  its socket (the only signal local servers understand). ``cancel(id)`` does the same;
- **priorities and deadlines**: per quota, waiters are served by (priority, arrival); a
  request still queued at its deadline is dropped unsent with the reason;
- **rate limits and cooldown** per quota key (API key + URL), see ``limiter`` and
  ``cooldown``; nothing goes to a backend cooling hard (the server asked for a pause), a
  softly cooling one is only asked when nothing else answers;
- **status rules**: rate limits, 5xx, timeouts and connection errors cool the backend down
  and fall back along the chain; 400/401/403/404 stop at once with the backend's error
  (the user must fix something); "unsupported" falls back without a cooldown;
- **hedging** (``routing.hedge_after_ms``, module ``hedging``): no first token by then
  starts the next backend too; the first to produce text wins, the other is cancelled;
- **batching** (module ``batching``): prefetch/batch requests for a backend that takes a
  prompt list, arriving within ``batch_window_s``, travel as one ``complete_batch``
  request; a member that leaves does not cancel the others;
- **cache** with type-through reuse, and **metrics** published on the bus.

Interruption works without an extra task per request (``state.Runner``): the dispatch
generator runs in the caller's task, and a supersede, cancel or timeout cancels that task
while it awaits inside the generator, then turns the ``CancelledError`` back into our own
error (the pattern of ``asyncio.timeout``). A cancel that arrives while the caller is busy
with an event is noticed when it asks for the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from typing import Any

from anyfill.config.model import Price, RoutingConfig
from anyfill.daemon.backends.base import Backend, FimPrompt, Usage
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
    ConfigError,
    RateLimited,
    RequestDropped,
)
from anyfill.daemon.scheduler.batching import batched
from anyfill.daemon.scheduler.cache import CompletionCache
from anyfill.daemon.scheduler.clock import Clock, RealClock, TimerHandle
from anyfill.daemon.scheduler.cooldown import Health
from anyfill.daemon.scheduler.events import AttemptFinished, CooldownChanged, Outcome, outcome_of
from anyfill.daemon.scheduler.feedback import RateFeedback
from anyfill.daemon.scheduler.hedging import hedged
from anyfill.daemon.scheduler.limiter import WINDOW_S, DeadlinePassed, Limiter, LimitSpec, Permit
from anyfill.daemon.scheduler.metrics import LaneState, Metrics
from anyfill.daemon.scheduler.state import (
    AttemptTimer,
    Lane,
    Observer,
    Runner,
    Ticket,
    estimate_tokens,
    falls_back,
    map_foreign,
)

log = logging.getLogger(__name__)

DEFAULT_BATCH_WINDOW_S = 0.004
DEFAULT_BATCH_MAX = 32


class Scheduler:
    """The ``Dispatcher`` of the daemon; an async context manager."""

    def __init__(
        self,
        backends: Iterable[Backend],
        routing: RoutingConfig | None = None,
        *,
        clock: Clock | None = None,
        bus: EventBus | None = None,
        cache: CompletionCache | None = None,
        batch_window_s: float = DEFAULT_BATCH_WINDOW_S,
        batch_max: int = DEFAULT_BATCH_MAX,
        batch_priorities: frozenset[str] = frozenset({"prefetch", "batch"}),
        unusable: Mapping[str, AnyfillError] | None = None,
        limit_window_s: float = WINDOW_S,
    ) -> None:
        self.routing = routing or RoutingConfig()
        self.unusable = dict(unusable or {})
        """Backends that could not be built (e.g. a missing key): their error is raised when
        a chain reaches them, after the backends before them failed."""
        self.clock: Clock = clock or RealClock()
        self.bus = bus
        self.cache = cache if cache is not None else CompletionCache()
        self.batch_window_s = batch_window_s
        self.batch_max = batch_max
        self.batch_priorities = batch_priorities
        self._lanes: dict[str, Lane] = {}
        limiters: dict[tuple[str, str], Limiter] = {}
        healths: dict[tuple[str, str], Health] = {}
        prices: dict[str, Price] = {}
        self._backends = list(backends)
        for backend in self._backends:
            if backend.name in self._lanes:
                raise ConfigError(f"two backends are named '{backend.name}'")
            key = (backend.config.url, backend.api_key or "")
            limits = backend.config.limits
            spec = LimitSpec(
                limits.requests_per_minute, limits.tokens_per_minute, limits.max_concurrent
            )
            if key in limiters:  # same key at the same URL: one quota, the stricter limits
                spec = limiters[key].spec.strictest(spec)
            limiters[key] = Limiter(spec, self.clock, window=limit_window_s)
            healths.setdefault(key, Health())
            prices[backend.name] = backend.config.price
        for backend in self._backends:
            key = (backend.config.url, backend.api_key or "")
            self._lanes[backend.name] = Lane(backend, limiters[key], healths[key])
        self.metrics = Metrics(self.clock, bus, prices, lane_state=self._lane_state)
        self._tickets: dict[str, Ticket] = {}
        self._targets: dict[str, set[Ticket]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._cooldown_timers: dict[str, TimerHandle] = {}
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Drop every live request and stop batches in flight."""
        self._closed = True
        for timer in self._cooldown_timers.values():
            timer.cancel()
        self._cooldown_timers.clear()
        for ticket in list(self._tickets.values()):
            ticket.drop("the scheduler is shutting down", "cancelled")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- public API --------------------------------------------------------------------

    @property
    def backend_names(self) -> list[str]:
        return list(self._lanes)

    @property
    def live_requests(self) -> int:
        return len(self._tickets)

    @property
    def background_tasks(self) -> int:
        return len(self._tasks)

    def cancel(self, request_id: str, reason: str = "cancelled") -> bool:
        ticket = self._tickets.get(request_id)
        if ticket is None:
            return False
        ticket.drop(reason, "cancelled")
        return True

    def cooling(self, backend: str) -> float:
        """Seconds the backend stays in cooldown (0: it may be asked now)."""
        return self._lanes[backend].health.seconds_left(self.clock.now())

    def dispatch(
        self, request: CompletionRequest, prompt: FimPrompt
    ) -> AsyncIterator[DispatchEvent]:
        return self._dispatch(request, prompt)

    # -- bookkeeping -------------------------------------------------------------------

    def _lane_state(self, name: str) -> LaneState:
        lane = self._lanes.get(name)
        if lane is None:
            return LaneState()
        now = self.clock.now()
        return LaneState(
            in_flight=lane.limiter.in_flight,
            queued=lane.limiter.queued,
            cooling_seconds_left=lane.health.seconds_left(now),
            cooling_reason=lane.health.reason if lane.health.cooling(now) else "",
        )

    def _admit(self, request: CompletionRequest) -> tuple[Ticket, bool]:
        """The request's ticket, and whether it dropped an older request."""
        if self._closed:
            raise RequestDropped(request.id, "the scheduler is shut down")
        ticket = Ticket(request)
        dropped = False
        old = self._tickets.get(request.id)
        if old is not None:
            old.drop(f"replaced by a new request with the same id {request.id}", "superseded")
            dropped = True
        if request.priority != "batch":
            target = request.context.target
            rivals = self._targets.get(target)
            if rivals:
                for other in list(rivals):
                    if other.rank >= ticket.rank:
                        other.drop(f"superseded by {request.id}", "superseded")
                        dropped = True
            self._targets.setdefault(target, set()).add(ticket)
        self._tickets[request.id] = ticket
        return ticket, dropped

    def _forget(self, ticket: Ticket) -> None:
        request = ticket.request
        if self._tickets.get(request.id) is ticket:
            del self._tickets[request.id]
        rivals = self._targets.get(request.context.target)
        if rivals is not None:
            rivals.discard(ticket)
            if not rivals:
                del self._targets[request.context.target]

    def _chain(self, request: CompletionRequest) -> tuple[list[Lane], AnyfillError | None]:
        """The usable lanes in order, and the error of an unusable backend that ends them."""
        names = request.backends or tuple(self.routing.default)
        lanes: list[Lane] = []
        for name in names:
            if name in self.unusable:
                if not lanes:
                    raise self.unusable[name]
                return lanes, self.unusable[name]
            lane = self._lanes.get(name)
            if lane is None:
                known = ", ".join(sorted({*self._lanes, *self.unusable})) or "none"
                raise ConfigError(
                    f"no enabled backend named '{name}' (configured: {known})",
                    key="routing.default",
                )
            if lane.config.enabled:
                lanes.append(lane)
        if not lanes:
            raise ConfigError(
                "no enabled backend to ask: enable one or add it to routing.default",
                key="routing.default",
            )
        return lanes, None

    def _record(
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

    def _cool(self, lane: Lane, error: BackendError, feedback: RateFeedback | None) -> None:
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
                CooldownChanged(lane.name, True, lane.health.seconds_left(now), str(error))
            )
            self._watch_cooldown(lane)

    def _watch_cooldown(self, lane: Lane) -> None:
        """Publish the end of ``lane``'s cooldown when it comes: ``CooldownChanged`` is
        retained state for the tray and MQTT, so an end nobody announced would read as
        cooling forever."""
        old = self._cooldown_timers.pop(lane.name, None)
        if old is not None:
            old.cancel()
        self._cooldown_timers[lane.name] = self.clock.call_at(
            lane.health.cooling_until, lambda: self._cooldown_due(lane)
        )

    def _cooldown_due(self, lane: Lane) -> None:
        if lane.health.cooling(self.clock.now()):  # extended meanwhile
            self._watch_cooldown(lane)
            return
        self._cooldown_over(lane)

    def _cooldown_over(self, lane: Lane) -> None:
        """Announce that ``lane`` may be asked again, if a cooldown was announced."""
        timer = self._cooldown_timers.pop(lane.name, None)
        if timer is None:
            return
        timer.cancel()
        if self.bus is not None:
            self.bus.publish(CooldownChanged(lane.name, False))

    def _succeeded(self, lane: Lane) -> None:
        """It answered: a soft cooldown ends now (``Health.succeed``). An answer that said
        its quota is used up (``Observer.on_response``) starts a hard one: announced here."""
        health = lane.health
        health.succeed()
        now = self.clock.now()
        if not health.cooling(now):
            if self._cooldown_timers:
                self._cooldown_over(lane)
        elif self.bus is not None and lane.name not in self._cooldown_timers:
            self.bus.publish(
                CooldownChanged(lane.name, True, health.seconds_left(now), health.reason)
            )
            self._watch_cooldown(lane)

    def _cooling_error(self, lane: Lane) -> BackendError:
        left = lane.health.seconds_left(self.clock.now())
        if lane.health.kind == "rate_limited":
            return RateLimited(
                lane.name,
                f"'{lane.name}' is rate-limited for another {left:.1f} s ({lane.health.reason})",
                retry_after=left,
            )
        return BackendUnavailable(
            lane.name,
            f"'{lane.name}' is cooling down for another {left:.1f} s after: {lane.health.reason}",
        )

    def _deadline_passed(self, ticket: Ticket, lane: Lane, waited_s: float) -> RequestDropped:
        reason = (
            f"past its deadline after {waited_s * 1e3:.0f} ms in the queue for '{lane.name}'"
            if waited_s > 0
            else "past its deadline before it could be sent"
        )
        ticket.drop_reason, ticket.drop_outcome = reason, "deadline"
        return RequestDropped(ticket.request.id, reason)

    # -- the request path ------------------------------------------------------------

    async def _dispatch(
        self, request: CompletionRequest, prompt: FimPrompt
    ) -> AsyncGenerator[DispatchEvent, None]:
        ticket, dropped = self._admit(request)
        try:
            if dropped:
                # Let the dropped request's task close its socket before this one opens a
                # connection: the server stops the old answer (and frees its slot) first.
                await asyncio.sleep(0)
            lanes, chain_end = self._chain(request)
            if request.deadline is not None and self.clock.now() >= request.deadline:
                error = self._deadline_passed(ticket, lanes[0], 0.0)
                self._record(request.id, lanes[0], "deadline", reason=error.reason)
                raise error
            interactive = request.priority == "interactive"
            for lane in lanes:
                hit = self.cache.get(lane.cache_key, prompt, interactive=interactive)
                if hit is not None:
                    self._record(request.id, lane, "cache", reason=f"typed {hit.typed}")
                    yield Attempt(lane.name)
                    if hit.plan is not None:
                        yield Planned(hit.plan)
                    yield Text(hit.text)
                    yield Finished(Usage())
                    return
            if self.routing.hedge_after_ms > 0 and len(lanes) > 1:
                try:
                    async with aclosing(hedged(self, ticket, lanes, prompt)) as events:
                        async for event in events:
                            yield event
                except BackendError as error:
                    if chain_end is not None and falls_back(error) and self.routing.fallback:
                        raise chain_end from error
                    raise
                return
            failures: list[BackendError] = []
            for lane in self._by_health(request, lanes, failures):
                ticket.check()
                try:
                    async with aclosing(self._attempt(ticket, ticket.runner, lane, prompt)) as ev:
                        async for event in ev:
                            yield event
                    return
                except BackendError as error:
                    if not falls_back(error) or not self.routing.fallback:
                        raise
                    failures.append(error)
            if chain_end is not None:
                raise chain_end
            raise self._all_failed(failures)
        finally:
            self._forget(ticket)

    def _by_health(
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
                failures.append(self._cooling_error(lane))
                self._record(request.id, lane, "cooling", reason=str(failures[-1]))
            elif lane.health.cooling(now):
                soft.append(lane)
            else:
                healthy.append(lane)
        return healthy + soft

    def _all_failed(self, failures: list[BackendError]) -> BackendError:
        last = failures[-1]
        if len(failures) > 1:
            last.add_note(EVERY_BACKEND_FAILED + "; ".join(f"{f.backend}: {f}" for f in failures))
        return last

    def _attempt(
        self,
        ticket: Ticket,
        runner: Runner,
        lane: Lane,
        prompt: FimPrompt,
        *,
        announce: bool = True,
    ) -> AsyncGenerator[DispatchEvent, None]:
        if lane.can_batch and ticket.request.priority in self.batch_priorities:
            return batched(self, ticket, runner, lane, prompt, announce=announce)
        return self._streamed(ticket, runner, lane, prompt, announce=announce)

    async def _acquire(
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
            error = self._deadline_passed(ticket, lane, self.clock.now() - enqueued)
            self._record(request.id, lane, "deadline", reason=error.reason)
            raise error from None

    async def _streamed(  # noqa: PLR0915 - one request's life reads best in one place
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
        permit = await self._acquire(ticket, runner, lane, estimate_tokens(prompt), enqueued)
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
                raise self._deadline_passed(ticket, lane, now - enqueued)
            if lane.health.blocked(now):  # the server asked for a pause while we waited
                outcome = "cooling"
                raise self._cooling_error(lane)
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
            self._succeeded(lane)
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
                    self._cool(lane, error, observer.feedback)
            raise
        except Exception as foreign:
            mapped = map_foreign(lane.name, foreign)
            outcome, reason = outcome_of(mapped), str(mapped)
            if mapped.retryable:
                self._cool(lane, mapped, observer.feedback)
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
                self._record(
                    request.id,
                    lane,
                    outcome,
                    enqueued=enqueued,
                    sent=sent,
                    first=first,
                    usage=observer.usage,
                    reason=reason,
                )


__all__ = ["Scheduler", "estimate_tokens", "falls_back"]

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
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import aclosing

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
from anyfill.daemon.errors import AnyfillError, BackendError, ConfigError, RequestDropped
from anyfill.daemon.scheduler.attempt import Attempts
from anyfill.daemon.scheduler.batching import batched
from anyfill.daemon.scheduler.cache import CompletionCache
from anyfill.daemon.scheduler.clock import Clock, RealClock
from anyfill.daemon.scheduler.cooldown import Health
from anyfill.daemon.scheduler.hedging import hedged
from anyfill.daemon.scheduler.limiter import WINDOW_S, Limiter, LimitSpec
from anyfill.daemon.scheduler.metrics import LaneState, Metrics
from anyfill.daemon.scheduler.state import (
    Lane,
    Runner,
    Ticket,
    estimate_tokens,
    falls_back,
)

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
        self.attempts = Attempts(
            self.routing,
            self.clock,
            bus,
            self.cache,
            self.metrics,
            batch_window_s=batch_window_s,
            batch_max=batch_max,
        )
        self._base_limits: dict[int, LimitSpec] = {}
        self._tickets: dict[str, Ticket] = {}
        self._targets: dict[str, set[Ticket]] = {}
        self._tasks = self.attempts.tasks
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Drop every live request and stop batches in flight."""
        self._closed = True
        self.attempts.stop_cooldown_timers()
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

    def share_limits(self, members: int) -> None:
        """Enforce 1/``members`` of each backend's configured per-minute limits: the share
        of one ``anyfill worker`` in a pool of ``members`` (concurrency stays per worker:
        it sizes the worker's own server slots)."""
        members = max(1, members)
        for lane in self._lanes.values():
            base = self._base_limits.setdefault(id(lane.limiter), lane.limiter.spec)

            def part(limit: int) -> int:
                return max(1, limit // members) if limit else 0

            lane.limiter.reshape(
                LimitSpec(
                    part(base.requests_per_minute),
                    part(base.tokens_per_minute),
                    base.max_concurrent,
                )
            )

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
                error = self.attempts.deadline_passed(ticket, lanes[0], 0.0)
                self.attempts.record(request.id, lanes[0], "deadline", reason=error.reason)
                raise error
            interactive = request.priority == "interactive"
            for lane in lanes:
                hit = self.cache.get(lane.cache_key, prompt, interactive=interactive)
                if hit is not None:
                    self.attempts.record(request.id, lane, "cache", reason=f"typed {hit.typed}")
                    yield Attempt(lane.name)
                    if hit.plan is not None:
                        yield Planned(hit.plan)
                    yield Text(hit.text)
                    yield Finished(Usage())
                    return
            if self.routing.hedge_after_ms > 0 and len(lanes) > 1:
                try:
                    hedging = hedged(self.attempts, self._attempt, ticket, lanes, prompt)
                    async with aclosing(hedging) as events:
                        async for event in events:
                            yield event
                except BackendError as error:
                    if chain_end is not None and falls_back(error) and self.routing.fallback:
                        raise chain_end from error
                    raise
                return
            failures: list[BackendError] = []
            for lane in self.attempts.by_health(request, lanes, failures):
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
            raise self.attempts.all_failed(failures)
        finally:
            self._forget(ticket)

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
            return batched(self.attempts, ticket, runner, lane, prompt, announce=announce)
        return self.attempts.streamed(ticket, runner, lane, prompt, announce=announce)


__all__ = ["Scheduler", "estimate_tokens", "falls_back"]

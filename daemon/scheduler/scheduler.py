"""The request queue: every completion passes through one :class:`Scheduler`.

It implements the ``Dispatcher`` protocol of ``anyfill.daemon.completion``:

- **latest wins**: a new interactive or prefetch request for the same ``Context.target``
  supersedes older ones of equal or lower priority. Unsent, they are never sent; streaming,
  the consumer's await is interrupted, which closes the backend's HTTP/1.1 response and so
  its socket (the only signal local servers understand). ``cancel(id)`` does the same;
- **priorities and deadlines**: per quota, waiters are served by (priority, arrival); a
  request still queued at its deadline is dropped unsent with the reason;
- **rate limits and cooldown** per quota key (API key + URL), see ``limiter`` and
  ``cooldown``; no request goes to a cooling backend;
- **status rules**: rate limits, 5xx, timeouts and connection errors cool the backend down
  and fall back along the chain; 400/401/403/404 stop at once with the backend's error
  (the user must fix something); "unsupported" falls back without a cooldown;
- **hedging** (``routing.hedge_after_ms``): no first token by then starts the next
  backend too; the first to produce text wins and the other is cancelled;
- **batching**: prefetch/batch requests for a backend that takes a prompt list, arriving
  within ``batch_window_s``, travel as one ``complete_batch`` request; a member that leaves
  does not cancel the others (the request is cancelled only when every member left);
- **cache** with type-through reuse, and **metrics** published on the bus.

Interruption works without an extra task per request: the dispatch generator runs in the
caller's task, and a supersede, cancel or timeout cancels that task while it awaits inside
the generator, then turns the ``CancelledError`` back into our own error (the pattern of
``asyncio.timeout``). A cancel that arrives while the caller is busy with an event is
noticed when it asks for the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from typing import Any, TypeVar

from anyfill.config.model import Price, RoutingConfig
from anyfill.daemon.backends.base import Backend, BatchResult, FimPrompt, Plan, Usage
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
    AnyfillError,
    AuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    BadRequest,
    ConfigError,
    ModelNotFound,
    ProtocolError,
    RateLimited,
    RequestDropped,
    ServerError,
    UnsupportedFeature,
)
from anyfill.daemon.scheduler.cache import CompletionCache
from anyfill.daemon.scheduler.clock import Clock, RealClock, TimerHandle
from anyfill.daemon.scheduler.cooldown import Health
from anyfill.daemon.scheduler.events import AttemptFinished, CooldownChanged, Outcome
from anyfill.daemon.scheduler.feedback import RateFeedback, quota_exhausted_for, read_feedback
from anyfill.daemon.scheduler.limiter import (
    PRIORITY_RANK,
    WINDOW_S,
    DeadlinePassed,
    Limiter,
    LimitSpec,
    Permit,
)
from anyfill.daemon.scheduler.metrics import LaneState, Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_BATCH_WINDOW_S = 0.004
DEFAULT_BATCH_MAX = 32


def estimate_tokens(prompt: FimPrompt) -> int:
    """Prompt plus answer budget; about 3 characters per token for code, rounded up."""
    return (len(prompt.prefix) + len(prompt.suffix)) // 3 + 1 + prompt.max_tokens


def outcome_of(error: BaseException) -> Outcome:
    if isinstance(error, RateLimited):
        return "rate_limited"
    if isinstance(error, ServerError):
        return "server_error"
    if isinstance(error, BackendTimeout):
        return "timeout"
    if isinstance(error, BackendUnavailable):
        return "unavailable"
    if isinstance(error, ProtocolError):
        return "protocol_error"
    if isinstance(error, AuthError):
        return "auth"
    if isinstance(error, ModelNotFound):
        return "not_found"
    if isinstance(error, BadRequest):
        return "bad_request"
    if isinstance(error, UnsupportedFeature):
        return "unsupported"
    return "error"


def falls_back(error: BackendError) -> bool:
    """Retryable failures and "this backend cannot do that" move on to the next backend."""
    return error.retryable or isinstance(error, UnsupportedFeature)


def map_foreign(backend: str, error: Exception) -> BackendError:
    """A failure a backend did not map itself (a bug or an unusual OS error)."""
    import httpx

    if isinstance(error, BackendError):
        return error
    if isinstance(error, httpx.TimeoutException | TimeoutError):
        return BackendTimeout(backend, f"'{backend}' timed out: {error}")
    if isinstance(error, httpx.TransportError | OSError):
        return BackendUnavailable(backend, f"cannot reach '{backend}': {error}")
    log.error("backend %s failed unexpectedly", backend, exc_info=error)
    return ProtocolError(backend, f"'{backend}' failed unexpectedly: {type(error).__name__}")


class _Runner:
    """The task whose awaits a request runs in, and how to interrupt it with our error."""

    __slots__ = ("cancel_sent", "error", "suspended", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.suspended = False
        self.cancel_sent = False
        self.error: BaseException | None = None

    def interrupt(self, error: BaseException, *, override: bool = False) -> None:
        if self.error is None or override:
            self.error = error
        if self.suspended and not self.cancel_sent and self.task is not None:
            self.cancel_sent = True
            self.task.cancel()

    def check(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    async def wait(self, awaitable: Awaitable[T]) -> T:
        if self.error is not None:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            self.check()
        self.task = asyncio.current_task()
        self.suspended = True
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self.cancel_sent:
                self.cancel_sent = False
                task = self.task
                if task is not None and task.uncancel() == 0 and self.error is not None:
                    error, self.error = self.error, None
                    raise error from None
            raise
        finally:
            self.suspended = False


class _Ticket:
    """A request between its first ``__anext__`` and its end."""

    __slots__ = ("drop_outcome", "drop_reason", "losers", "rank", "request", "runner")

    def __init__(self, request: CompletionRequest) -> None:
        self.request = request
        self.runner = _Runner()
        self.rank = PRIORITY_RANK.get(request.priority, 1)
        self.drop_reason: str | None = None
        self.drop_outcome: Outcome = "cancelled"
        self.losers: set[str] = set()

    def drop(self, reason: str, outcome: Outcome) -> None:
        if self.drop_reason is None:
            self.drop_reason, self.drop_outcome = reason, outcome
        self.runner.interrupt(self.dropped(), override=True)

    def dropped(self) -> RequestDropped:
        return RequestDropped(self.request.id, self.drop_reason or "cancelled")

    def check(self) -> None:
        if self.drop_reason is not None:
            raise self.dropped()


class _Lane:
    """One configured backend and the quota state it shares with others."""

    def __init__(self, backend: Backend, limiter: Limiter, health: Health) -> None:
        self.backend = backend
        self.name = backend.name
        self.config = backend.config
        self.limiter = limiter
        self.health = health
        self.cache_key = f"{backend.name}\x00{backend.config.model}\x00{backend.config.template}"
        self.batch: _Batch | None = None
        self.can_batch = backend.capabilities.prompt_list


class _Observer:
    """What a backend reports besides text: headers (for feedback), usage and its plan."""

    __slots__ = ("feedback", "health", "now", "permit", "plan", "usage")

    def __init__(self, health: Health, permit: Permit, now: Callable[[], float]) -> None:
        self.health = health
        self.permit = permit
        self.now = now
        self.feedback: RateFeedback | None = None
        self.usage: Usage | None = None
        self.plan: Plan | None = None

    def on_response(self, status: int, headers: Mapping[str, str]) -> None:
        if status >= 400:
            self.feedback = read_feedback(status, headers)
            return
        held = quota_exhausted_for(headers)
        if held > 0:
            self.health.hold_until(self.now() + held, "the server reports its quota used up")

    def on_usage(self, usage: Usage) -> None:
        self.usage = usage
        if usage.prompt_tokens is not None or usage.completion_tokens is not None:
            self.permit.correct_tokens((usage.prompt_tokens or 0) + (usage.completion_tokens or 0))

    def on_plan(self, plan: Plan) -> None:
        self.plan = plan


class _Member:
    __slots__ = ("deadline", "future", "left", "prompt", "rank", "request_id", "tokens")

    @property
    def waiting(self) -> bool:
        """Still wants its answer (its consumer may be cancelled before ``left`` is set)."""
        return not self.left and not self.future.done()

    def __init__(
        self, request: CompletionRequest, prompt: FimPrompt, future: asyncio.Future[_BatchAnswer]
    ) -> None:
        self.request_id = request.id
        self.prompt = prompt
        self.future = future
        self.rank = PRIORITY_RANK.get(request.priority, 1)
        self.deadline = request.deadline
        self.tokens = estimate_tokens(prompt)
        self.left = False


class _BatchAnswer:
    __slots__ = ("first_at", "plan", "result", "sent_at", "size")

    def __init__(
        self, result: BatchResult, plan: Plan | None, size: int, sent_at: float, first_at: float
    ) -> None:
        self.result = result
        self.plan = plan
        self.size = size
        self.sent_at = sent_at
        self.first_at = first_at


class _Batch:
    def __init__(self, lane: _Lane, go: asyncio.Future[None]) -> None:
        self.lane = lane
        self.members: list[_Member] = []
        self.go = go
        self.closed = False
        self.sent = False
        self.task: asyncio.Task[None] | None = None
        self.timer: TimerHandle | None = None

    def close_now(self) -> None:
        """No more members: the window ended, the batch is full, or everyone left."""
        self.closed = True
        if self.lane.batch is self:
            self.lane.batch = None
        if not self.go.done():
            self.go.set_result(None)

    def member_left(self) -> None:
        if not any(member.waiting for member in self.members):
            if self.sent and self.task is not None:
                self.task.cancel()  # nobody wants the answer: close the connection
            self.close_now()


_HEDGE, _EVENT, _FAILED = 0, 1, 2


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
        self._lanes: dict[str, _Lane] = {}
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
            self._lanes[backend.name] = _Lane(backend, limiters[key], healths[key])
        self.metrics = Metrics(self.clock, bus, prices, lane_state=self._lane_state)
        self._tickets: dict[str, _Ticket] = {}
        self._targets: dict[str, set[_Ticket]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Drop every live request and stop batches in flight."""
        self._closed = True
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

    def _admit(self, request: CompletionRequest) -> _Ticket:
        if self._closed:
            raise RequestDropped(request.id, "the scheduler is shut down")
        ticket = _Ticket(request)
        old = self._tickets.get(request.id)
        if old is not None:
            old.drop(f"replaced by a new request with the same id {request.id}", "superseded")
        if request.priority != "batch":
            target = request.context.target
            rivals = self._targets.get(target)
            if rivals:
                for other in list(rivals):
                    if other.rank >= ticket.rank:
                        other.drop(f"superseded by {request.id}", "superseded")
            self._targets.setdefault(target, set()).add(ticket)
        self._tickets[request.id] = ticket
        return ticket

    def _forget(self, ticket: _Ticket) -> None:
        request = ticket.request
        if self._tickets.get(request.id) is ticket:
            del self._tickets[request.id]
        rivals = self._targets.get(request.context.target)
        if rivals is not None:
            rivals.discard(ticket)
            if not rivals:
                del self._targets[request.context.target]

    def _chain(self, request: CompletionRequest) -> tuple[list[_Lane], AnyfillError | None]:
        """The usable lanes in order, and the error of an unusable backend that ends them."""
        names = request.backends or tuple(self.routing.default)
        lanes: list[_Lane] = []
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
        lane: _Lane,
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

    def _cool(self, lane: _Lane, error: BackendError, feedback: RateFeedback | None) -> None:
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

    def _cooling_error(self, lane: _Lane) -> BackendError:
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

    def _deadline_passed(self, ticket: _Ticket, lane: _Lane, waited_s: float) -> RequestDropped:
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
        ticket = self._admit(request)
        try:
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
                async with aclosing(self._hedged(ticket, lanes, prompt)) as events:
                    async for event in events:
                        yield event
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
        self, request: CompletionRequest, lanes: list[_Lane], failures: list[BackendError]
    ) -> list[_Lane]:
        """Healthy lanes in chain order, then softly cooling ones as a last resort.

        Hard-cooling lanes are left out; their "wait N s" error joins ``failures``.
        """
        now = self.clock.now()
        healthy: list[_Lane] = []
        soft: list[_Lane] = []
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
            last.add_note(
                "every backend failed: " + "; ".join(f"{f.backend}: {f}" for f in failures)
            )
        return last

    def _attempt(
        self,
        ticket: _Ticket,
        runner: _Runner,
        lane: _Lane,
        prompt: FimPrompt,
        *,
        announce: bool = True,
    ) -> AsyncGenerator[DispatchEvent, None]:
        if lane.can_batch and ticket.request.priority in self.batch_priorities:
            return self._batched(ticket, runner, lane, prompt, announce=announce)
        return self._streamed(ticket, runner, lane, prompt, announce=announce)

    async def _acquire(
        self, ticket: _Ticket, runner: _Runner, lane: _Lane, tokens: int, enqueued: float
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
        ticket: _Ticket,
        runner: _Runner,
        lane: _Lane,
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
        observer = _Observer(lane.health, permit, clock.now)
        stream: AsyncIterator[str] | None = None
        timers: list[TimerHandle] = []
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
            first_token_s, total_s = timeouts.first_token_s, timeouts.total_s
            timers.append(
                clock.call_at(
                    sent + first_token_s,
                    lambda: runner.interrupt(
                        BackendTimeout(
                            lane.name, f"no text from '{lane.name}' within {first_token_s:g} s"
                        )
                    ),
                )
            )
            timers.append(
                clock.call_at(
                    sent + total_s,
                    lambda: runner.interrupt(
                        BackendTimeout(
                            lane.name, f"'{lane.name}' did not finish within {total_s:g} s"
                        )
                    ),
                )
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
                    timers[0].cancel()
                pieces.append(chunk)
                yield Text(chunk)
                ticket.check()
            if not planned and observer.plan is not None:
                yield Planned(observer.plan)
                ticket.check()
            outcome = "ok"
            lane.health.succeed()
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
            for timer in timers:
                timer.cancel()
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

    # -- batching --------------------------------------------------------------------

    async def _batched(  # noqa: PLR0915 - one request's life reads best in one place
        self,
        ticket: _Ticket,
        runner: _Runner,
        lane: _Lane,
        prompt: FimPrompt,
        *,
        announce: bool,
    ) -> AsyncGenerator[DispatchEvent, None]:
        request = ticket.request
        loop = asyncio.get_running_loop()
        batch = lane.batch
        if batch is None or batch.closed:
            batch = _Batch(lane, loop.create_future())
            lane.batch = batch
            batch.timer = self.clock.call_at(
                self.clock.now() + self.batch_window_s, batch.close_now
            )
            task = asyncio.create_task(self._run_batch(batch), name=f"batch:{lane.name}")
            batch.task = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        member = _Member(request, prompt, loop.create_future())
        batch.members.append(member)
        if len(batch.members) >= self.batch_max:
            batch.close_now()
        enqueued = self.clock.now()
        outcome: Outcome = "error"
        reason = ""
        answer: _BatchAnswer | None = None
        try:
            answer = await runner.wait(member.future)
            result = answer.result
            if result.error is not None:
                raise result.error
            outcome = "ok"
            if announce:
                yield Attempt(lane.name)
            if answer.plan is not None:
                yield Planned(answer.plan)
            if result.text:
                self.cache.put(
                    lane.cache_key, prompt, result.text, answer.plan, result.usage, ahead=True
                )
                yield Text(result.text)
            yield Finished(result.usage)
        except RequestDropped as error:
            outcome = ticket.drop_outcome if ticket.drop_reason else "deadline"
            reason = error.reason
            raise
        except (GeneratorExit, asyncio.CancelledError):
            outcome = ticket.drop_outcome if ticket.drop_reason else "cancelled"
            if lane.name in ticket.losers:
                outcome = "hedge_lost"
            raise
        except BackendError as error:
            outcome, reason = outcome_of(error), str(error)
            raise
        except Exception as foreign:
            mapped = map_foreign(lane.name, foreign)
            outcome, reason = outcome_of(mapped), str(mapped)
            raise mapped from foreign
        finally:
            if not member.future.done():
                member.future.cancel()
            member.left = True
            batch.member_left()
            self._record(
                request.id,
                lane,
                outcome,
                enqueued=enqueued,
                sent=answer.sent_at if answer else None,
                first=answer.first_at if answer else None,
                usage=answer.result.usage if answer else None,
                reason=reason,
                batched=answer.size if answer else 0,
            )

    async def _run_batch(self, batch: _Batch) -> None:  # noqa: PLR0915 - one request's life reads best in one place
        lane = batch.lane
        clock = self.clock
        runner = _Runner()
        permit: Permit | None = None
        members: list[_Member] = []
        timer: TimerHandle | None = None
        try:
            await runner.wait(batch.go)
            batch.closed = True
            if lane.batch is batch:
                lane.batch = None
            if batch.timer is not None:
                batch.timer.cancel()
            members = [member for member in batch.members if member.waiting]
            if not members:
                return
            rank = min(member.rank for member in members)
            priority = next(name for name, value in PRIORITY_RANK.items() if value == rank)
            tokens = sum(member.tokens for member in members)
            granted = lane.limiter.try_acquire(tokens)
            if granted is None:
                granted = await runner.wait(lane.limiter.acquire(priority, tokens))
            permit = granted
            now = clock.now()
            members = []
            for member in batch.members:
                if not member.waiting:
                    continue
                if member.deadline is not None and now >= member.deadline:
                    member.future.set_exception(
                        RequestDropped(member.request_id, "past its deadline before it was sent")
                    )
                    continue
                members.append(member)
            if not members:
                return
            if lane.health.blocked(now):
                error = self._cooling_error(lane)
                for member in members:
                    member.future.set_exception(error)
                return
            members = [member for member in members if member.waiting]
            granted.mark_sent(now)
            batch.sent = True
            observer = _Observer(lane.health, granted, clock.now)
            total_s = lane.config.timeouts.total_s
            timer = clock.call_at(
                now + total_s,
                lambda: runner.interrupt(
                    BackendTimeout(lane.name, f"'{lane.name}' did not finish within {total_s:g} s")
                ),
            )
            try:
                results = await runner.wait(
                    lane.backend.complete_batch([member.prompt for member in members], observer)
                )
            except BackendError as error:
                if error.retryable:
                    self._cool(lane, error, observer.feedback)
                raise
            except (asyncio.CancelledError, AnyfillError):
                raise
            except Exception as foreign:
                mapped = map_foreign(lane.name, foreign)
                if mapped.retryable:
                    self._cool(lane, mapped, observer.feedback)
                raise mapped from foreign
            if len(results) != len(members):
                raise ProtocolError(
                    lane.name,
                    f"'{lane.name}' answered {len(results)} prompts for {len(members)} asked",
                )
            lane.health.succeed()
            done = clock.now()
            if observer.usage is not None and not any(
                r.usage.prompt_tokens or r.usage.completion_tokens for r in results
            ):
                results[0].usage = observer.usage
            for member, result in zip(members, results, strict=True):
                if not member.future.done():
                    member.future.set_result(
                        _BatchAnswer(result, observer.plan, len(members), now, done)
                    )
        except AnyfillError as error:
            for member in members or batch.members:
                if not member.future.done():
                    member.future.set_exception(error)
        except asyncio.CancelledError:
            for member in batch.members:
                if not member.future.done():
                    member.future.set_exception(
                        RequestDropped(member.request_id, "the batch was stopped")
                    )
            raise
        finally:
            batch.closed = True
            if lane.batch is batch:
                lane.batch = None
            if batch.timer is not None:
                batch.timer.cancel()
            if timer is not None:
                timer.cancel()
            if permit is not None:
                permit.release()

    # -- hedging ---------------------------------------------------------------------

    async def _hedged(  # noqa: PLR0915 - one request's life reads best in one place
        self, ticket: _Ticket, lanes: list[_Lane], prompt: FimPrompt
    ) -> AsyncGenerator[DispatchEvent, None]:
        request = ticket.request
        clock = self.clock
        runner = ticket.runner
        queue: asyncio.Queue[tuple[int, _Lane | None, Any]] = asyncio.Queue()
        hedge_s = self.routing.hedge_after_ms / 1000.0
        failures: list[BackendError] = []
        candidates = self._by_health(request, lanes, failures)
        if not candidates:
            raise self._all_failed(failures)
        running: dict[str, asyncio.Task[None]] = {}
        next_index = 0
        hedge_timer: TimerHandle | None = None
        winner: _Lane | None = None
        finished = False
        buffered: list[DispatchEvent] = []

        def start() -> None:
            nonlocal next_index, hedge_timer
            lane = candidates[next_index]
            next_index += 1
            running[lane.name] = asyncio.create_task(
                self._hedge_arm(ticket, lane, prompt, queue), name=f"hedge:{lane.name}"
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
                        if next_index < len(candidates) and self.routing.fallback:
                            buffered.clear()
                            start()
                        else:
                            raise self._all_failed(failures)
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

    async def _hedge_arm(
        self,
        ticket: _Ticket,
        lane: _Lane,
        prompt: FimPrompt,
        queue: asyncio.Queue[tuple[int, _Lane | None, Any]],
    ) -> None:
        runner = _Runner()
        try:
            async with aclosing(
                self._attempt(ticket, runner, lane, prompt, announce=False)
            ) as events:
                async for event in events:
                    queue.put_nowait((_EVENT, lane, event))
        except Exception as error:  # noqa: BLE001 - handed to the consumer, who raises it
            queue.put_nowait((_FAILED, lane, error))


__all__ = ["Scheduler", "estimate_tokens", "falls_back"]

"""What the scheduler keeps per request and per backend, and how it classifies failures.

``Runner`` is the trick that makes interruption cheap: a request runs in its caller's task,
and a supersede, cancel or timeout cancels that task while it awaits inside the scheduler,
then turns the ``CancelledError`` back into our own error (the pattern of
``asyncio.timeout``). ``Ticket`` is a live request; ``Lane`` a backend with the quota state
it shares; ``Observer`` what a backend reports besides text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from anyfill.daemon.backends.base import Backend, FimPrompt, Plan, Usage
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    ProtocolError,
    RequestDropped,
    UnsupportedFeature,
)
from anyfill.daemon.scheduler.clock import Clock
from anyfill.daemon.scheduler.cooldown import Health
from anyfill.daemon.scheduler.events import Outcome
from anyfill.daemon.scheduler.feedback import RateFeedback, quota_exhausted_for, read_feedback
from anyfill.daemon.scheduler.limiter import PRIORITY_RANK, Limiter, Permit

if TYPE_CHECKING:
    from anyfill.daemon.scheduler.batching import Batch

log = logging.getLogger("anyfill.daemon.scheduler")

T = TypeVar("T")


def estimate_tokens(prompt: FimPrompt) -> int:
    """Prompt plus answer budget; about 3 characters per token for code, rounded up."""
    return (len(prompt.prefix) + len(prompt.suffix)) // 3 + 1 + prompt.max_tokens


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


class Runner:
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


class AttemptTimer:
    """The first-token and total timeouts of one attempt, on one loop timer.

    Armed for the first token; when it fires after text came, it re-arms for the total.
    One timer per attempt instead of two, and nothing to cancel when the first text comes
    (timers are a visible part of what a request costs: ``anyfill bench p2``).
    """

    __slots__ = ("clock", "first_s", "got_text", "handle", "lane", "runner", "sent", "total_s")

    def __init__(
        self,
        clock: Clock,
        runner: Runner,
        lane: str,
        sent: float,
        *,
        first_s: float,
        total_s: float,
    ) -> None:
        self.clock = clock
        self.runner = runner
        self.lane = lane
        self.sent = sent
        self.first_s = first_s
        self.total_s = total_s
        self.got_text = False
        if first_s <= total_s:
            self.handle = clock.call_at(sent + first_s, self._first_token_due)
        else:
            self.handle = clock.call_at(sent + total_s, self._total_due)

    def _first_token_due(self) -> None:
        if self.got_text:
            self.handle = self.clock.call_at(self.sent + self.total_s, self._total_due)
            return
        self.runner.interrupt(
            BackendTimeout(self.lane, f"no text from '{self.lane}' within {self.first_s:g} s")
        )

    def _total_due(self) -> None:
        self.runner.interrupt(
            BackendTimeout(self.lane, f"'{self.lane}' did not finish within {self.total_s:g} s")
        )

    def cancel(self) -> None:
        self.handle.cancel()


class Ticket:
    """A request between its first ``__anext__`` and its end."""

    __slots__ = ("drop_outcome", "drop_reason", "losers", "rank", "request", "runner")

    def __init__(self, request: CompletionRequest) -> None:
        self.request = request
        self.runner = Runner()
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


class Lane:
    """One configured backend and the quota state it shares with others."""

    def __init__(self, backend: Backend, limiter: Limiter, health: Health) -> None:
        self.backend = backend
        self.name = backend.name
        self.config = backend.config
        self.limiter = limiter
        self.health = health
        self.cache_key = f"{backend.name}\x00{backend.config.model}\x00{backend.config.template}"
        self.batch: Batch | None = None
        self.can_batch = backend.capabilities.prompt_list


class Observer:
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
            now = self.now()
            self.health.hold_until(now + held, "the server reports its quota used up", now)

    def on_usage(self, usage: Usage) -> None:
        self.usage = usage
        if usage.prompt_tokens is not None or usage.completion_tokens is not None:
            self.permit.correct_tokens((usage.prompt_tokens or 0) + (usage.completion_tokens or 0))

    def on_plan(self, plan: Plan) -> None:
        self.plan = plan

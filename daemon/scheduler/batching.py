"""Batching: prefetch and batch requests for a prompt-list backend travel together.

Requests arriving within ``batch_window_s`` (up to ``batch_max``) become one
``complete_batch`` request, answered and fanned back out. A member that leaves before the
batch is sent is left out; one that leaves after only stops waiting; when every member has
left, the batch request is cancelled, which closes its connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from anyfill.daemon.backends.base import BatchResult, FimPrompt, Plan
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
    BackendError,
    BackendTimeout,
    ProtocolError,
    RequestDropped,
)
from anyfill.daemon.scheduler.attempt import Attempts
from anyfill.daemon.scheduler.clock import TimerHandle
from anyfill.daemon.scheduler.events import Outcome, outcome_of
from anyfill.daemon.scheduler.limiter import PRIORITY_RANK, Permit
from anyfill.daemon.scheduler.state import (
    Lane,
    Observer,
    Runner,
    Ticket,
    estimate_tokens,
    map_foreign,
)


class Member:
    __slots__ = ("deadline", "future", "left", "prompt", "rank", "request_id", "tokens")

    @property
    def waiting(self) -> bool:
        """Still wants its answer (its consumer may be cancelled before ``left`` is set)."""
        return not self.left and not self.future.done()

    def __init__(
        self, request: CompletionRequest, prompt: FimPrompt, future: asyncio.Future[BatchAnswer]
    ) -> None:
        self.request_id = request.id
        self.prompt = prompt
        self.future = future
        self.rank = PRIORITY_RANK.get(request.priority, 1)
        self.deadline = request.deadline
        self.tokens = estimate_tokens(prompt)
        self.left = False


class BatchAnswer:
    __slots__ = ("first_at", "plan", "result", "sent_at", "size")

    def __init__(
        self, result: BatchResult, plan: Plan | None, size: int, sent_at: float, first_at: float
    ) -> None:
        self.result = result
        self.plan = plan
        self.size = size
        self.sent_at = sent_at
        self.first_at = first_at


class Batch:
    def __init__(self, lane: Lane, go: asyncio.Future[None]) -> None:
        self.lane = lane
        self.members: list[Member] = []
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


async def batched(  # noqa: PLR0915 - one request's life reads best in one place
    attempts: Attempts,
    ticket: Ticket,
    runner: Runner,
    lane: Lane,
    prompt: FimPrompt,
    *,
    announce: bool,
) -> AsyncGenerator[DispatchEvent, None]:
    request = ticket.request
    loop = asyncio.get_running_loop()
    batch = lane.batch
    if batch is None or batch.closed:
        batch = Batch(lane, loop.create_future())
        lane.batch = batch
        batch.timer = attempts.clock.call_at(
            attempts.clock.now() + attempts.batch_window_s, batch.close_now
        )
        task = asyncio.create_task(run_batch(attempts, batch), name=f"batch:{lane.name}")
        batch.task = task
        attempts.tasks.add(task)
        task.add_done_callback(attempts.tasks.discard)
    member = Member(request, prompt, loop.create_future())
    batch.members.append(member)
    if len(batch.members) >= attempts.batch_max:
        batch.close_now()
    enqueued = attempts.clock.now()
    outcome: Outcome = "error"
    reason = ""
    answer: BatchAnswer | None = None
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
            attempts.cache.put(
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
        attempts.record(
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


async def run_batch(attempts: Attempts, batch: Batch) -> None:  # noqa: PLR0915 - one request's life reads best in one place
    lane = batch.lane
    clock = attempts.clock
    runner = Runner()
    permit: Permit | None = None
    members: list[Member] = []
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
            error = attempts.cooling_error(lane)
            for member in members:
                member.future.set_exception(error)
            return
        members = [member for member in members if member.waiting]
        granted.mark_sent(now)
        batch.sent = True
        observer = Observer(lane.health, granted, clock.now)
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
                attempts.cool(lane, error, observer.feedback)
            raise
        except (asyncio.CancelledError, AnyfillError):
            raise
        except Exception as foreign:
            mapped = map_foreign(lane.name, foreign)
            if mapped.retryable:
                attempts.cool(lane, mapped, observer.feedback)
            raise mapped from foreign
        if len(results) != len(members):
            raise ProtocolError(
                lane.name,
                f"'{lane.name}' answered {len(results)} prompts for {len(members)} asked",
            )
        attempts.succeeded(lane)
        done = clock.now()
        if observer.usage is not None and not any(
            r.usage.prompt_tokens or r.usage.completion_tokens for r in results
        ):
            results[0].usage = observer.usage
        for member, result in zip(members, results, strict=True):
            if not member.future.done():
                member.future.set_result(
                    BatchAnswer(result, result.plan or observer.plan, len(members), now, done)
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

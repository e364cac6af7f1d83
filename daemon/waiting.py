"""Waiting for the first of several asyncio events, with or without a deadline; and
steps whose read-only parts a cancel may end at once."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Coroutine
from typing import TypeVar

T = TypeVar("T")


async def first_set(*events: asyncio.Event, timeout_s: float | None = None) -> bool:
    """True as soon as one of ``events`` is set, False once ``timeout_s`` has passed.

    A timeout of zero or less only looks whether one is set already.
    """
    if any(event.is_set() for event in events):
        return True
    if timeout_s is not None and timeout_s <= 0:
        return False
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(
            waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in waiters:
            waiter.cancel()
    return bool(done)


class Interrupted(Exception):
    """A step that changed nothing yet was ended by a cancel (see :func:`interruptible`)."""


class Interruptions:
    """A cancel scope for a step that otherwise runs to its end (the pipeline's capture
    and insertion): the parts of it inside :func:`interruptible` end at once on
    :meth:`interrupt`, the rest finishes."""

    def __init__(self) -> None:
        self._interrupted = False
        self._inside: set[asyncio.Task[object]] = set()

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def interrupt(self) -> None:
        self._interrupted = True
        for task in list(self._inside):
            task.cancel()


_scope: contextvars.ContextVar[Interruptions | None] = contextvars.ContextVar(
    "anyfill_interruptions", default=None
)


def run_interruptibly(step: Coroutine[object, object, T], scope: Interruptions) -> asyncio.Task[T]:
    """``step`` as a task whose :func:`interruptible` parts ``scope`` can end."""
    context = contextvars.copy_context()
    context.run(_scope.set, scope)
    return asyncio.get_running_loop().create_task(step, context=context)


@contextlib.asynccontextmanager
async def interruptible() -> AsyncIterator[None]:
    """A part of a step that only reads (the user's clipboard, before anything was taken):
    a cancel of the step ends it at once with :class:`Interrupted`, instead of after it
    ran its course (an owner dripping an incremental transfer for a minute)."""
    scope, task = _scope.get(), asyncio.current_task()
    if scope is None or task is None:
        yield
        return
    if scope.interrupted:
        raise Interrupted
    scope._inside.add(task)
    try:
        yield
    except asyncio.CancelledError:
        if _ours(scope, task):
            raise Interrupted from None
        raise
    finally:
        scope._inside.discard(task)


def _ours(scope: Interruptions, task: asyncio.Task[object]) -> bool:
    """The cancel came from ``scope`` alone (not also from someone else's cancel)."""
    return scope.interrupted and task.uncancel() == 0

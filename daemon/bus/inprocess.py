"""The in-process event bus: typed, frozen events from the core to whoever listens.

Publishing never blocks and never fails: a slow subscriber loses its oldest events rather
than stalling the request path. Events are frozen dataclasses with a ``topic`` (an MQTT-style
path relative to ``anyfill/<node>/``) so the MQTT adapter can bridge them without knowing
each type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

E = TypeVar("E")


class Event(Protocol):
    @property
    def topic(self) -> str: ...


class Subscription(AsyncIterator[Any]):
    """Events of the chosen types, in order; ``async with`` or ``close()`` to leave."""

    def __init__(self, bus: EventBus, types: tuple[type, ...], maxsize: int) -> None:
        self._bus = bus
        self.types = types
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)
        self.dropped = 0

    def _offer(self, event: object) -> None:
        if self._queue.full():
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(event)

    def get_nowait(self) -> Any:
        """The next queued event; raises ``asyncio.QueueEmpty`` when none is waiting."""
        return self._queue.get_nowait()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Any:
        return await self._queue.get()

    def close(self) -> None:
        self._bus._subscriptions.discard(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class EventBus:
    """Publish/subscribe of typed events inside one process."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self._listeners: list[tuple[tuple[type, ...], Callable[[Any], None]]] = []

    def publish(self, event: object) -> None:
        for types, callback in self._listeners:
            if not types or isinstance(event, types):
                try:
                    callback(event)
                except Exception:  # a broken listener must not break the request path
                    log.exception("event listener %r failed", callback)
        for subscription in self._subscriptions:
            if not subscription.types or isinstance(event, subscription.types):
                subscription._offer(event)

    def subscribe(self, *types: type, maxsize: int = 1000) -> Subscription:
        """Queue events of ``types`` (all events when none given) for an async reader."""
        subscription = Subscription(self, types, maxsize)
        self._subscriptions.add(subscription)
        return subscription

    def listen(self, callback: Callable[[Any], None], *types: type) -> Callable[[], None]:
        """Call ``callback`` synchronously for each event of ``types``; returns an unsubscribe."""
        entry = (types, callback)
        self._listeners.append(entry)

        def remove() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)

        return remove

    @property
    def has_audience(self) -> bool:
        return bool(self._subscriptions or self._listeners)

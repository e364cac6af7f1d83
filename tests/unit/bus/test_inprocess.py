from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from anyfill.daemon.bus import EventBus


@dataclass(frozen=True)
class Ping:
    n: int

    @property
    def topic(self) -> str:
        return "test/ping"


@dataclass(frozen=True)
class Pong:
    n: int

    @property
    def topic(self) -> str:
        return "test/pong"


async def test_subscribers_get_the_types_they_asked_for_in_order() -> None:
    bus = EventBus()
    pings = bus.subscribe(Ping)
    everything = bus.subscribe()
    bus.publish(Ping(1))
    bus.publish(Pong(2))
    bus.publish(Ping(3))
    assert [await anext(pings), await anext(pings)] == [Ping(1), Ping(3)]
    assert [everything.get_nowait() for _ in range(3)] == [Ping(1), Pong(2), Ping(3)]
    with pytest.raises(asyncio.QueueEmpty):
        pings.get_nowait()


async def test_a_slow_subscriber_loses_its_oldest_events_and_never_blocks() -> None:
    bus = EventBus()
    slow = bus.subscribe(Ping, maxsize=2)
    for n in range(5):
        bus.publish(Ping(n))
    assert slow.dropped == 3
    assert [slow.get_nowait(), slow.get_nowait()] == [Ping(3), Ping(4)]


async def test_leaving_stops_delivery() -> None:
    bus = EventBus()
    async with bus.subscribe(Ping) as sub:
        bus.publish(Ping(1))
    bus.publish(Ping(2))
    assert sub.get_nowait() == Ping(1)
    with pytest.raises(asyncio.QueueEmpty):
        sub.get_nowait()
    assert not bus.has_audience


def test_listeners_are_called_and_a_broken_one_does_not_break_publishing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    seen: list[object] = []

    def broken(event: object) -> None:
        raise RuntimeError("listener bug")

    bus.listen(broken, Ping)
    remove = bus.listen(seen.append, Pong)
    with caplog.at_level(logging.ERROR):
        bus.publish(Ping(1))
        bus.publish(Pong(2))
    assert seen == [Pong(2)]
    assert "listener" in caplog.text
    remove()
    bus.publish(Pong(3))
    assert seen == [Pong(2)]

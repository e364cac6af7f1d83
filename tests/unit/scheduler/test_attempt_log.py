"""The daemon's DEBUG line per finished attempt: the scheduler's events on a real bus."""

from __future__ import annotations

import logging

import pytest

from anyfill.config.model import RoutingConfig, Settings
from anyfill.daemon.backends.base import Plan, Usage
from anyfill.daemon.bus import EventBus
from anyfill.daemon.errors import BadRequest
from anyfill.daemon.scheduler.attempt_log import log_attempts
from anyfill.daemon.scheduler.clock import ManualClock
from anyfill.daemon.scheduler.scheduler import Scheduler
from tests.unit.scheduler.fakes import FakeBackend, Reply, prompt, request

LOGGER = "anyfill.daemon.scheduler.attempts"


def attempt_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_a_finished_attempt_logs_one_line_without_the_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    reply = Reply(chunks=("return a", " * b"), usage=Usage(12, 2), plan=Plan("native"))
    backend = FakeBackend("local", clock, default=reply)
    bus = EventBus()
    log_attempts(bus)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    async with Scheduler([backend], RoutingConfig(default=["local"]), clock=clock, bus=bus) as s:
        events = [e async for e in s.dispatch(request("r1"), prompt("def mul(a, b):\n    "))]
    assert events
    [line] = attempt_lines(caplog)
    assert "request r1" in line
    assert "backend local" in line
    assert ", ok," in line
    assert "tokens 12+2" in line
    assert "def mul" not in line
    assert "return a" not in line


async def test_the_reason_of_a_failure_is_private(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    said = "prompt 'def secret_function' is too long"
    backend = FakeBackend("local", clock, default=Reply(error=BadRequest("local", said)))
    bus = EventBus()
    log_attempts(bus)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    async with Scheduler([backend], RoutingConfig(default=["local"]), clock=clock, bus=bus) as s:
        with pytest.raises(BadRequest):
            [e async for e in s.dispatch(request("r2"), prompt())]
    [line] = attempt_lines(caplog)
    assert "bad_request" in line
    assert f"<{len(said)} chars hidden>" in line
    assert "secret_function" not in line


async def test_nothing_is_formatted_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    bus = EventBus()
    log_attempts(bus)
    caplog.set_level(logging.INFO, logger=LOGGER)
    backend = FakeBackend("local", clock)
    async with Scheduler([backend], RoutingConfig(default=["local"]), clock=clock, bus=bus) as s:
        [e async for e in s.dispatch(request("r3"), prompt())]
    assert attempt_lines(caplog) == []


def test_the_daemon_engine_publishes_to_a_bus_that_logs_attempts() -> None:
    from anyfill.daemon.app import default_completer

    engine = default_completer(Settings())
    assert isinstance(engine.bus, EventBus)
    assert engine.bus.has_audience

"""Fixtures for the broker tests: each test starts its own mosquitto (a config it writes, a
free loopback port; modules that need another broker or one per module override
``broker``) and, where a daemon is needed, its own Xvfb and ``anyfill run --headless``
process; ``gpu`` is a loopback llama.cpp a worker asks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import MOSQUITTO, SKIP_REASON, Broker
from tests.servers.script import Reply


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if MOSQUITTO is not None:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "broker" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _release_mqtt_clients() -> Iterator[None]:
    """paho clients hold a socket pair that only the garbage collector closes (they sit in
    reference cycles): collect them here, not in the middle of a later test that counts the
    process's sockets (tests/integration/scheduler/test_soak.py)."""
    yield
    gc.collect()


@pytest.fixture
def broker() -> Iterator[Broker]:
    with Broker.start() as running:
        yield running


@pytest.fixture
def gpu() -> Iterator[tuple[LlamaCpp, LoopbackServer]]:
    responder = LlamaCpp(default=Reply(text="return a + b"))
    with LoopbackServer.in_thread(responder) as server:
        yield responder, server

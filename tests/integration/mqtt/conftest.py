"""Fixtures for the broker tests: each test module starts its own mosquitto (a config it
writes, a free loopback port) and, where a daemon is needed, its own Xvfb and
``anyfill run --headless`` process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.servers.mosquitto import MOSQUITTO, SKIP_REASON


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

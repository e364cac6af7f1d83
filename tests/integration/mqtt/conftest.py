"""Fixtures for the broker tests: each test module starts its own mosquitto (a config it
writes, a free loopback port) and, where a daemon is needed, its own Xvfb and
``anyfill run --headless`` process."""

from __future__ import annotations

import pytest

from tests.servers.mosquitto import MOSQUITTO, SKIP_REASON


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if MOSQUITTO is not None:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "broker" in item.keywords:
            item.add_marker(skip)

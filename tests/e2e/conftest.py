"""Fixtures for the desktop end-to-end tests: one private X server, one loopback llama.cpp
responder, one anyfill daemon and one Qt target per session; figures in the summary.

``ANYFILL_E2E_REPEAT=N`` repeats the insertion cases N times (default 1) for the
clipboard (R1) and focus-guard (R2) figures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.harness import MISSING, SKIP_REASON, Daemon, QtTarget, XSession, daemon_config
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp

REPEAT = max(1, int(os.environ.get("ANYFILL_E2E_REPEAT", "1")))


@dataclass
class Tally:
    ok: int = 0
    total: int = 0

    def check(self, ok: bool) -> bool:
        self.total += 1
        self.ok += int(ok)
        return ok


FIGURES: dict[str, Tally] = {
    "R1 user clipboard restored": Tally(),
    "R1 user PRIMARY restored": Tally(),
    "R2 nothing inserted after a focus change": Tally(),
}


CHROMIUM_RUNS: dict[str, object] = {}
"""Filled by the Chromium race test: runs, load, outcome statuses, failures by kind."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not MISSING:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "desktop" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if any(t.total for t in FIGURES.values()):
        terminalreporter.section("desktop figures")
        for name, tally in FIGURES.items():
            terminalreporter.write_line(f"{name}: {tally.ok}/{tally.total}")
    if CHROMIUM_RUNS:
        terminalreporter.section("chromium races")
        for key, value in CHROMIUM_RUNS.items():
            if key == "failed_runs" and isinstance(value, list):
                for *failed, log in value:
                    terminalreporter.write_line(f"failed run: {failed}")
                    terminalreporter.write_line(log)
            else:
                terminalreporter.write_line(f"{key}: {value}")


@pytest.fixture(scope="session")
def x() -> Iterator[XSession]:
    with XSession.start() as session:
        yield session


@pytest.fixture(scope="session")
def llama() -> Iterator[tuple[LlamaCpp, LoopbackServer]]:
    responder = LlamaCpp()
    with LoopbackServer.in_thread(responder) as server:
        yield responder, server


@pytest.fixture(scope="session")
def daemon(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    process = Daemon(x, daemon_config(llama[1].url))
    yield process
    process.stop()


@pytest.fixture(scope="session")
def qt(x: XSession) -> Iterator[QtTarget]:
    target = QtTarget(x)
    yield target
    target.close()

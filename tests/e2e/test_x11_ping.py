"""The X11 ping (EWMH _NET_WM_PING) against real programs: Qt answers it (Qt 6 sends its
answer to StructureNotify listeners on the root window, GTK to SubstructureNotify), a
window that does not list it cannot be asked, a stopped program leaves it unanswered
and is not asked again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from anyfill.daemon.x11.connection import XConnection
from anyfill.daemon.x11.windows import X11Windows
from tests.e2e.harness import QtTarget, XSession

pytestmark = pytest.mark.desktop


def pings(x: XSession, window_ids: list[int], timeout_s: float = 2.0) -> list[bool | None]:
    async def run() -> list[bool | None]:
        async with XConnection(x.display) as conn:
            windows = X11Windows(conn)
            return [await windows.ping(window_id, timeout_s) for window_id in window_ids]

    return asyncio.run(run())


def test_qt_answers_every_ping(x: XSession) -> None:
    target = QtTarget(x, "anyfill-ping-qt")
    try:
        assert pings(x, [target.wid] * 3) == [True, True, True]
    finally:
        target.close()


@pytest.mark.skipif(not os.path.exists("/usr/bin/xterm"), reason="needs xterm (Debian: xterm)")
def test_a_window_that_does_not_list_the_ping_cannot_be_asked(x: XSession) -> None:
    term = x.spawn(["xterm", "-e", sys.executable, "-c", "input()"], "xterm-ping.log")
    try:
        wid = x.find_window("xterm")
        protocols = x.run("xprop", "-id", str(wid), "WM_PROTOCOLS")
        assert "_NET_WM_PING" not in protocols, protocols
        assert pings(x, [wid]) == [None]
    finally:
        os.killpg(term.pid, signal.SIGTERM)
        term.wait(10)


def test_a_stopped_program_leaves_the_ping_unanswered_once(x: XSession) -> None:
    target = QtTarget(x, "anyfill-ping-stopped")
    try:
        os.kill(target.process.pid, signal.SIGSTOP)
        try:
            assert pings(x, [target.wid, target.wid], timeout_s=0.5) == [False, None]
        finally:
            os.kill(target.process.pid, signal.SIGCONT)
    finally:
        target.close()

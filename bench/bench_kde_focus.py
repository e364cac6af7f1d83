"""The focus guard's question on KDE: what one ``focused()`` costs through KWin (our KWin
script) and through AT-SPI's active window (the fallback), beside a bare D-Bus round trip
to KWin in the same run (the floor: the KWin route is one such round trip).

Everything real: KWin 5.27 headless on a private session bus with the AT-SPI bus, our Qt
editor on Qt's Wayland plugin as the active window.

    .venv/bin/python bench/bench_kde_focus.py [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dbus_fast import BusType, Message
from dbus_fast.aio import MessageBus

from anyfill.daemon.atspi.focus import AtspiFocus
from anyfill.daemon.wayland.kwin import KWinFocus
from tests.e2e.harness import QtTarget
from tests.e2e.kde import UNUSABLE, KdeSession


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed_runs(call: Callable[[], object], runs: int) -> list[float]:
    call()  # the first question loads the script / builds the accessibility tree
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def round_trips(address: str, runs: int) -> list[float]:
    """The same call KWinFocus makes before answering, on a bus of our own."""
    loop = asyncio.new_event_loop()
    try:

        async def connect() -> MessageBus:
            return await MessageBus(bus_address=address, bus_type=BusType.SESSION).connect()

        bus = loop.run_until_complete(connect())
        question = Message(
            destination="org.kde.KWin",
            path="/Scripting",
            interface="org.kde.kwin.Scripting",
            member="isScriptLoaded",
            signature="s",
            body=["none"],
        )
        times = timed_runs(lambda: loop.run_until_complete(bus.call(question)), runs)
        bus.disconnect()
        return times
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    if UNUSABLE:
        sys.exit(UNUSABLE)
    with KdeSession.start() as kde:
        os.environ.update(kde.env)
        target = QtTarget(kde, "bench-kde")  # type: ignore[arg-type]
        known: set[str] = set()
        window = kde.wait_new_active(known, "the Qt window")
        kwin = KWinFocus(kde.env["DBUS_SESSION_BUS_ADDRESS"])
        atspi = AtspiFocus()
        try:
            found = kwin.focused()
            assert found is not None, "KWin did not report the Qt window"
            assert found.pid == window["pid"], (found, window)
            floor = round_trips(kde.env["DBUS_SESSION_BUS_ADDRESS"], args.runs)
            via_kwin = timed_runs(kwin.focused, args.runs)
            via_atspi = timed_runs(atspi.focused, args.runs)
        finally:
            kwin.close()
            target.close()
    base = percentile(floor, 0.5)
    print(f"runs: {args.runs}, load average: {os.getloadavg()[0]:.2f}")
    for name, values in (
        ("D-Bus round trip to KWin (floor)", floor),
        ("KWinFocus.focused()", via_kwin),
        ("AtspiFocus.focused() (fallback)", via_atspi),
    ):
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        print(f"{name:36s} p50 {p50:7.3f} ms  p95 {p95:7.3f} ms  ({p50 / base:5.1f}x floor)")


if __name__ == "__main__":
    main()

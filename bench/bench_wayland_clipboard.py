"""Wayland paste with the user's clipboard kept: the native data-control route against the
wl-clipboard route it replaces, measured in the same run.

Everything real: sway headless, our Qt editor on Qt's Wayland plugin (it takes wtype's
Ctrl+V), a separate client owning CLIPBOARD with text, HTML and PNG (``tests/e2e/wl_offer``),
wtype for the keys, and anyfill's own ``paste()`` over each Clipboard port. For each run:

- paste keys -> the user's clipboard restored (from the start of the keys to the return of
  ``Clipboard.restore``): the native route restores once the app read the paste and went
  quiet; wl-clipboard restores after its fixed 0.3 s settle time;
- whether the completion landed in the editor and the clipboard came back with every
  format, byte for byte (wl-paste).

    .venv/bin/python bench/bench_wayland_clipboard.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anyfill.daemon.desktop.inject.paste import paste
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Offer, Which
from anyfill.daemon.wayland.clipboard import WlClipboard
from anyfill.daemon.wayland.connection import WaylandConnection
from anyfill.daemon.wayland.datacontrol import DataControlClipboard
from anyfill.daemon.wayland.keys import WtypeKeys
from tests.e2e.harness import QtTarget, wait_until
from tests.e2e.wayland import UNUSABLE, WaylandSession
from tests.e2e.wl_offer import start_owner

CLIPBOARD = {
    "text/plain;charset=utf-8": "the user's copy ✓".encode(),
    "text/html": "<b>the user's</b> copy ✓".encode(),
    "image/png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 300,
}
PRIMARY = {"text/plain;charset=utf-8": b"selected"}
MIDDLE = "schöne ✓ "


class TimedKeys(WtypeKeys):
    pressed_at = 0.0

    async def press(self, chord: str) -> None:
        self.pressed_at = time.monotonic()
        await super().press(chord)


def timed_restore(clipboard: Any) -> list[float]:
    """Note when each restore returned (the instance's own method, wrapped)."""
    stamps: list[float] = []
    original = clipboard.restore

    async def restore(
        which: Which, snapshot: ClipSnapshot, reader: int | None = None, as_of: Offer | None = None
    ) -> Offer | None:
        result = await original(which, snapshot, reader, as_of)
        stamps.append(time.monotonic())
        return result

    clipboard.restore = restore
    return stamps


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def intact(wl: WaylandSession) -> bool:
    listed = set(wl.run("wl-paste", "--list-types").split())
    if listed != set(CLIPBOARD):
        return False
    for mime, data in CLIPBOARD.items():
        got = subprocess.run(
            ["wl-paste", "--no-newline", "--type", mime],
            env=wl.env,
            capture_output=True,
            timeout=5,
            check=False,
        )
        if got.stdout != data:
            return False
    return True


async def measure(wl: WaylandSession, target: QtTarget, route: str, runs: int) -> dict[str, Any]:
    latencies: list[float] = []
    restored = inserted = 0
    async with AsyncExitStack() as stack:
        clipboard: Any
        if route == "native":
            conn = await stack.enter_async_context(WaylandConnection(wl.env))
            clipboard = await stack.enter_async_context(DataControlClipboard(conn))
        else:
            clipboard = await stack.enter_async_context(WlClipboard())
        stamps = timed_restore(clipboard)
        keys = TimedKeys()
        desktop = Desktop(keys, clipboard, windows=None)  # type: ignore[arg-type]
        for _ in range(runs):
            owner = await asyncio.to_thread(start_owner, wl, CLIPBOARD, PRIMARY)
            await asyncio.to_thread(target.set, "Grüße aus Köln", 6)
            await paste(
                desktop,
                MIDDLE,
                "<ctrl>+v",
                restore=True,
                restore_timeout_s=1.5,
                guard=lambda: None,
            )
            latencies.append((stamps[-1] - keys.pressed_at) * 1000)
            state = await asyncio.to_thread(target.state)
            inserted += state["text"] == "Grüße schöne ✓ aus Köln"
            restored += await asyncio.to_thread(intact, wl)
            owner.kill()
            owner.wait(5)
    return {"latencies": latencies, "restored": restored, "inserted": inserted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if UNUSABLE:
        raise SystemExit(UNUSABLE)
    with WaylandSession.start() as wl:
        os.environ.update(wl.env)  # wtype and wl-clipboard run in this session
        os.environ.pop("DISPLAY", None)
        known = {n.get("id") for n in wl.windows()}
        target = QtTarget(wl, "bench-wl-clip")  # type: ignore[arg-type]
        try:
            wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "Qt")
            results = {}
            for route in ("native", "wl-clipboard", "native"):  # native twice: warm and load
                name = route if route not in results else f"{route} (again)"
                results[name] = asyncio.run(measure(wl, target, route, args.runs))
        finally:
            target.close()
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for name, result in results.items():
        values = result["latencies"]
        print(
            f"{name:>16}: paste keys -> clipboard restored p50 {percentile(values, 0.5):.1f} ms,"
            f" p95 {percentile(values, 0.95):.1f} ms, mean {statistics.fmean(values):.1f} ms;"
            f" every format restored {result['restored']}/{len(values)};"
            f" inserted {result['inserted']}/{len(values)}"
        )
    native = percentile(results["native"]["latencies"], 0.5)
    old = percentile(results["wl-clipboard"]["latencies"], 0.5)
    print(f"ratio native/wl-clipboard (medians): {native / old:.2f}x")


if __name__ == "__main__":
    main()

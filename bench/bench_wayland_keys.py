"""Paste keys sent -> text in the application, on sway headless: native Wayland GTK
Mousepad beside our native Wayland Qt editor, for both key routes (anyfill's own virtual
keyboard, and wtype as the fallback), in the same run.

Each run puts a fresh text on the clipboard (wl-copy), then times from just before Ctrl+V
goes out until the text is in the application:

- Mousepad: sway reports the window's new title; Mousepad puts a '*' in front of it when the
  document changes (it is saved, so unchanged, before every run).
- Qt: the target reports its text over its control socket, polled every millisecond.

Success counts say how many pastes landed within 2 s.

    .venv/bin/python bench/bench_wayland_keys.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anyfill.daemon.desktop.ports import Keys
from anyfill.daemon.wayland.keys import WtypeKeys
from anyfill.daemon.wayland.virtual_keyboard import VirtualKeyboard
from tests.e2e.harness import QtTarget, wait_until
from tests.e2e.wayland import UNUSABLE, WaylandSession, open_mousepad

DEADLINE_S = 2.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Titles:
    """sway's window events as (arrival time, title), read on a thread."""

    def __init__(self, wl: WaylandSession) -> None:
        self.events: queue.Queue[tuple[float, str]] = queue.Queue()
        self.process = subprocess.Popen(
            ["swaymsg", "-t", "subscribe", "-m", '["window"]'],
            env=wl.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            if event.get("change") == "title":
                self.events.put((time.monotonic(), str(event["container"].get("name"))))

    def drain(self) -> None:
        while not self.events.empty():
            self.events.get_nowait()

    def wait_starred(self) -> float | None:
        deadline = time.monotonic() + DEADLINE_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                at, title = self.events.get(timeout=left)
            except queue.Empty:
                return None
            if title.startswith("*"):
                return at
        return None


async def paste_runs(
    keys: Keys, runs: int, prepare: Callable[[int], None], landed: Callable[[int], float | None]
) -> tuple[list[float], int]:
    times: list[float] = []
    for run in range(runs + 2):  # two warm-up runs
        prepare(run)
        watch = asyncio.create_task(asyncio.to_thread(landed, run))
        await asyncio.sleep(0.02)  # the watcher is running before the keys go out
        started = time.monotonic()
        await keys.press("<ctrl>+v")
        at = await watch
        if run >= 2 and at is not None:
            times.append((at - started) * 1000)
    return times, len(times)


async def measure(wl: WaylandSession, keys: Keys, runs: int) -> dict[str, tuple[list[float], int]]:
    figures: dict[str, tuple[list[float], int]] = {}
    editor = open_mousepad(wl, "start\n", 1, 0)
    titles = Titles(wl)

    def prepare_gtk(run: int) -> None:
        wl.set_clipboard(f"gtk{run} ")
        if editor.modified():
            editor.save()
        wait_until(lambda: not editor.modified(), 5, "mousepad to show it saved")
        titles.drain()

    try:
        figures["GTK Mousepad"] = await paste_runs(
            keys, runs, prepare_gtk, lambda _run: titles.wait_starred()
        )
    finally:
        titles.process.terminate()
        titles.process.wait(5)
        editor.close()

    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, "bench-qt")  # type: ignore[arg-type]
    try:
        wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")

        def prepare_qt(run: int) -> None:
            wl.set_clipboard(f"qt{run} ")
            target.set("start", 0)

        def landed_qt(run: int) -> float | None:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                if f"qt{run} " in target.state()["text"]:
                    return time.monotonic()
                time.sleep(0.001)
            return None

        figures["Qt editor"] = await paste_runs(keys, runs, prepare_qt, landed_qt)
    finally:
        target.close()
    return figures


async def main_async(runs: int) -> None:
    print(f"load average at start: {os.getloadavg()}")
    with WaylandSession.start() as wl:
        for key in ("WAYLAND_DISPLAY", "XDG_RUNTIME_DIR"):
            os.environ[key] = wl.env[key]
        for route in ("own virtual keyboard", "wtype"):
            async with AsyncExitStack() as stack:
                keys: Keys = WtypeKeys()
                if route.startswith("own"):
                    keys = await stack.enter_async_context(VirtualKeyboard(wl.env))
                for app, (times, ok) in (await measure(wl, keys, runs)).items():
                    if not times:
                        print(f"{route}, {app}: 0/{runs} landed")
                        continue
                    print(
                        f"{route}, Ctrl+V sent -> text in {app}: "
                        f"p50 {percentile(times, 0.5):.1f} ms, p95 {percentile(times, 0.95):.1f} ms"
                        f", landed {ok}/{runs}"
                    )
    print(f"load average at end: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if UNUSABLE:
        raise SystemExit(UNUSABLE)
    asyncio.run(main_async(args.runs))


if __name__ == "__main__":
    main()

"""``anyfill trigger complete``: process start -> the daemon acting on it, p50/p95.

A desktop shortcut (the Wayland hotkey route) starts ``anyfill trigger complete`` on every
press, so its whole cost counts: interpreter start, imports, the socket round trip. The
daemon side is the real control server with the real built-in commands and a real
``Pipeline`` (its desktop ports faked, as in the unit tests); "acting" is the moment the
daemon's hotkey callback runs, stamped with ``time.monotonic()`` (one clock for every
process on Linux), from just before the process is spawned.

Baselines, same run, interleaved with the measured commands so load drifts hit all alike:
``python -c pass`` with the same interpreter (the floor for any Python client) and the
click path of the same command (``anyfill --debug trigger complete``, which the
executable does not short-cut), to show what the short-cut saves.

    .venv/bin/python bench/bench_trigger.py [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anyfill.config.model import Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.control.builtins import install_builtins
from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.core import Core
from anyfill.daemon.desktop.hotkeys import Action
from tests.unit.desktop.test_pipeline import build


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Daemon:
    """The control server on its own loop thread; ``acted`` gets one stamp per trigger."""

    def __init__(self) -> None:
        self.acted: list[float] = []
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.run(),))

    async def run(self) -> None:
        self._stop = asyncio.Event()
        pipeline, *_ = build()

        def on_trigger(action: Action) -> None:  # the hotkey source's callback
            self.acted.append(time.monotonic())

        core = Core(Settings(), EventBus())
        core.attach(pipeline, None)
        core.trigger = on_trigger  # type: ignore[method-assign]  # stamp the hotkey callback
        commands = Commands()
        install_builtins(commands, core)
        async with ControlServer(commands) as server:
            await server.start_serving()
            self.ready.set()
            await self._stop.wait()

    def __enter__(self) -> Daemon:
        self.thread.start()
        if not self.ready.wait(30):
            raise SystemExit("the control server did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(30)
        self.loop.close()


def timed(args: list[str], daemon: Daemon | None) -> tuple[float, float | None]:
    """(ms to exit, ms to the daemon acting or None) for one process."""
    before = len(daemon.acted) if daemon else 0
    started = time.monotonic()
    code = subprocess.run(args, check=False, stdout=subprocess.DEVNULL).returncode
    ended = time.monotonic()
    if code != 0:
        raise SystemExit(f"{' '.join(args)} exited with {code}")
    acted = None
    if daemon is not None:
        if len(daemon.acted) != before + 1:
            raise SystemExit(f"{' '.join(args)}: the daemon did not act exactly once")
        acted = (daemon.acted[-1] - started) * 1000
    return (ended - started) * 1000, acted


def row(name: str, values: list[float], base: float) -> str:
    p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
    return (
        f"{name:<50} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  mean "
        f"{statistics.fmean(values):6.1f} ms  x{p50 / base:4.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    script = shutil.which("anyfill", path=os.path.dirname(sys.executable))
    if script is None:
        raise SystemExit("no anyfill executable beside this interpreter: pip install -e .")
    runtime = tempfile.mkdtemp(prefix="afb-")
    os.environ["XDG_RUNTIME_DIR"] = runtime
    baseline: list[float] = []
    fast_act: list[float] = []
    fast_exit: list[float] = []
    click_act: list[float] = []
    try:
        with Daemon() as daemon:
            for run in range(args.runs + 3):  # three warm-up rounds fill the page cache
                base_exit, _ = timed([sys.executable, "-c", "pass"], None)
                exit_ms, act_ms = timed([script, "trigger", "complete"], daemon)
                _, slow_act_ms = timed([script, "--debug", "trigger", "complete"], daemon)
                if run >= 3 and act_ms is not None and slow_act_ms is not None:
                    baseline.append(base_exit)
                    fast_act.append(act_ms)
                    fast_exit.append(exit_ms)
                    click_act.append(slow_act_ms)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    base = percentile(baseline, 0.5)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"runs: {len(baseline)} each, interleaved; load average {load}; {sys.executable}")
    print("ratio = p50 / p50 of the baseline")
    print(row("baseline: python -c pass (start to exit)", baseline, base))
    print(row("anyfill trigger complete: start -> daemon acts", fast_act, base))
    print(row("anyfill trigger complete: start -> exit", fast_exit, base))
    print(row("click path (anyfill --debug trigger ...): -> acts", click_act, base))


if __name__ == "__main__":
    main()

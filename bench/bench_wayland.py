"""Wayland figures: the trigger command's cost, and trigger -> text inserted in a native
Wayland Mousepad beside the same measure on X11, with a zero-latency backend.

Everything real: sway headless with a native Wayland Mousepad (AT-SPI insertion), a private
Xvfb with an X11 Mousepad (the X11 desktop path), one anyfill daemon for each, a loopback
llama.cpp responder that answers at once. Times are wall clock around the process a desktop
shortcut would run, so process start is included:

- trigger: ``anyfill trigger complete`` from spawn to exit; it exits once the daemon has
  acted on it (the press is handed to the pipeline). Baseline in the same run: spawning the
  same interpreter with nothing to do.
- inserted: ``anyfill trigger complete --wait`` from spawn to exit; it exits once the text
  is in the document (on Wayland read back through AT-SPI) and the outcome reported.

    .venv/bin/python bench/bench_wayland.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.harness import Daemon, XSession, daemon_config
from tests.e2e.wayland import UNUSABLE, WaylandSession, open_mousepad
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.monotonic()
    code = subprocess.run(
        args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    ).returncode
    return (time.monotonic() - started) * 1000, code


def measure(daemon: Daemon, runs: int) -> tuple[list[float], list[float]]:
    trigger = [sys.executable, "-m", "anyfill.daemon.launcher", "trigger", "complete"]
    acted: list[float] = []
    inserted: list[float] = []
    for run in range(runs + 2):  # two warm-up runs: imports, connections, AT-SPI caches
        count = len(daemon.outcomes())
        ms, code = timed(trigger, daemon.env)
        outcome = daemon.wait_outcome(count + 1)
        if code != 0 or outcome.status != "inserted":
            raise SystemExit(f"trigger run {run}: exit {code}, {outcome}")
        ms_wait, code = timed([*trigger, "--wait"], daemon.env)
        if code != 0:
            raise SystemExit(f"trigger --wait run {run}: exit {code}\n{daemon.log()[-2000:]}")
        if run >= 2:
            acted.append(ms)
            inserted.append(ms_wait)
    return acted, inserted


def row(name: str, values: list[float]) -> str:
    return (
        f"{name}: p50 {percentile(values, 0.5):.1f} ms, p95 {percentile(values, 0.95):.1f} ms, "
        f"mean {statistics.fmean(values):.1f} ms (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if UNUSABLE:
        raise SystemExit(UNUSABLE)
    responder = LlamaCpp(default=Reply(text="big ", chunks=["big "]))
    with LoopbackServer.in_thread(responder) as server:
        with WaylandSession.start() as wl:
            daemon = Daemon(wl, daemon_config(server.url), "bench-wl", runtime_dir=wl.run_dir)  # type: ignore[arg-type]
            editor = open_mousepad(wl, "alpha beta gamma\n", 1, 6)
            try:
                wl_acted, wl_inserted = measure(daemon, args.runs)
                methods = {o.method for o in daemon.outcomes()}
            finally:
                daemon.stop()
                editor.close()
            floor = [
                timed([sys.executable, "-c", "pass"], dict(os.environ))[0] for _ in range(args.runs)
            ]
        with XSession.start() as x:
            daemon = Daemon(x, daemon_config(server.url), "bench-x11")
            process = x.spawn(
                ["mousepad", "--disable-server", "--line=1", "--column=6", str(_doc(x.workdir))],
                "mousepad.log",
            )
            try:
                x.focus(x.find_window("mousepad"))
                x11_acted, x11_inserted = measure(daemon, args.runs)
                x11_methods = {o.method for o in daemon.outcomes()}
                x11_capture = {o.capture for o in daemon.outcomes()}
            finally:
                daemon.stop()
                process.terminate()
                process.wait(10)
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(
        f"Wayland: insertion by {sorted(methods)}; X11: {sorted(x11_methods)}, "
        f"capture {sorted(x11_capture)}"
    )
    print(row("baseline: python -c pass (process start)", floor))
    print(row("Wayland trigger -> daemon acted", wl_acted))
    print(row("X11     trigger -> daemon acted", x11_acted))
    print(row("Wayland trigger -> inserted (native Wayland Mousepad)", wl_inserted))
    print(row("X11     trigger -> inserted (X11 Mousepad)", x11_inserted))
    print(
        f"ratio trigger/baseline (medians): "
        f"{percentile(wl_acted, 0.5) / percentile(floor, 0.5):.2f}x; "
        f"Wayland/X11 inserted (medians): "
        f"{percentile(wl_inserted, 0.5) / percentile(x11_inserted, 0.5):.2f}x"
    )


def _doc(workdir: Path) -> Path:
    path = workdir / "bench.txt"
    path.write_text("alpha beta gamma\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    main()

"""Suggestions as you type: what they cost, measured for real.

A private Xvfb with its own D-Bus session and accessibility bus, our PySide6 target, a
loopback llama.cpp responder, and ``anyfill run`` with the tray; keys typed through XTEST
(as the user's keyboard). One clock for every process (``time.monotonic()``).

Printed:
- pause -> ghost painted, p50/p95: from the end of the user's pause (the trigger fires) to
  the ghost's first paint, minus the backend's share (the engine's request, timed in the
  daemon); what is left is anyfill's own path (AT-SPI read, preview, bus, Qt paint);
- keystroke -> request cancelled, p50: a key typed while a (slow) request is in flight, to
  the loopback server seeing the connection closed;
- requests per 100 characters typed at 5 characters/s (steady, ±30 % jitter);
- the daemon's CPU time while those 100 characters are typed, with ``suggestions.auto`` on
  and, in the same run, another daemon with it off (the baseline).

    .venv/bin/python bench/bench_suggestions.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_hotkey_insert import percentile, xtest_presser
from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.e2e.test_accessibility import BUS_LAUNCHER
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

ASKED = re.compile(r"suggestion asked at ([\d.]+), backend ([\d.]+) ms")
PAINTED = re.compile(r"ghost (\d+) painted \d+ characters at ([\d.]+)")
CONFIG = """
[hotkeys]
complete = "<ctrl>+<alt>+o"
preview = "<ctrl>+<alt>+p"
cancel = "<ctrl>+<alt>+j"

[capture]
strategies = ["accessibility"]

[suggestions]
auto = {auto}
"""
TEXT = "the quick brown fox jumps over the lazy dog and then it runs into the woods to sleep"


def a11y_session(x: XSession) -> None:
    import subprocess

    out = subprocess.run(
        ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
        env=x.env,
        capture_output=True,
        text=True,
        check=True,
    )
    address, pid = out.stdout.split()[:2]
    x.env["DBUS_SESSION_BUS_ADDRESS"] = address
    x.env.pop("NO_AT_BRIDGE", None)
    x.env["QT_LINUX_ACCESSIBILITY_ALWAYS_ON"] = "1"
    x.env["ANYFILL_BENCH_DBUS_PID"] = pid
    x.spawn([str(BUS_LAUNCHER), "--launch-immediately"], "a11y.log")
    time.sleep(0.5)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def keysym(char: str) -> str:
    return "space" if char == " " else char


def type_steady(press: object, text: str, rate: float, seed: int = 1) -> None:
    rng = random.Random(seed)
    for char in text:
        press([keysym(char)])  # type: ignore[operator]
        time.sleep(rng.uniform(0.7, 1.3) / rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    responder = LlamaCpp(default=Reply(text=" ok"))
    try:
        run(args.runs, responder)
    except TimeoutError:
        for log in LOGS:
            print(log.read_text()[-4000:] if log.exists() else "", file=sys.stderr)
        raise


LOGS: list[Path] = []


def run(runs: int, responder: LlamaCpp) -> None:
    with LoopbackServer.in_thread(responder) as server, XSession.start() as x:
        a11y_session(x)
        target = QtTarget(x, "bench-suggest-target")
        press = xtest_presser(x.display)
        config = daemon_config(server.url, CONFIG.format(auto="true")).replace(
            'level = "INFO"', 'level = "DEBUG"'
        )
        on = Daemon(x, config, name="suggest-on", headless=False)
        LOGS.append(on.log_path)
        wait_until(lambda: "listening to the focused" in on.log(), 10, "the listener")

        # pause -> ghost painted (backend excluded)
        overhead: list[float] = []
        for n in range(runs):
            text = f"line {n}: value ="
            target.set(text, len(text))
            x.focus(target.wid)
            before = len(PAINTED.findall(on.log()))
            press(["space"])
            wait_until(lambda b=before: len(PAINTED.findall(on.log())) > b, 10, "the ghost")
            asked = ASKED.findall(on.log())[-1]
            painted = PAINTED.findall(on.log())[before]
            overhead.append((float(painted[1]) - float(asked[0])) * 1000 - float(asked[1]))
            press(["Escape"])
            time.sleep(0.2)

        # keystroke -> request cancelled
        cancel_ms: list[float] = []
        for n in range(max(runs // 2, 5)):
            responder.push(Reply(text="slow answer", delay_s=5.0))
            text = f"slow {n} ="
            target.set(text, len(text))
            x.focus(target.wid)
            asked = len(server.requests)
            press(["space"])
            wait_until(lambda a=asked: len(server.requests) > a, 10, "the request")
            gone = len(server.disconnects)
            time.sleep(0.05)
            pressed = time.monotonic()
            press(["x"])
            wait_until(lambda g=gone: len(server.disconnects) > g, 5, "the request to be closed")
            cancel_ms.append((server.disconnects[gone].at - pressed) * 1000)
            responder.queue.clear()
            time.sleep(1.2)  # the pause after "x" asks once more; let it finish
            press(["Escape"])

        # requests per 100 characters at 5 characters/s, and CPU, auto on vs off: one
        # daemon after the other (both listening at once would each see the typing)
        results = {"on": typed_100(x, target, press, server, on)}
        on.stop()
        off = Daemon(x, config.replace("auto = true", "auto = false"), name="off", headless=False)
        results["off"] = typed_100(x, target, press, server, off)
        off.stop()
        target.close()
        os.kill(int(x.env["ANYFILL_BENCH_DBUS_PID"]), 15)
    report(overhead, cancel_ms, results)


def typed_100(
    x: XSession, target: QtTarget, press: object, server: LoopbackServer, daemon: Daemon
) -> tuple[int, float]:
    """Requests sent and the daemon's CPU seconds while 100 characters are typed at 5/s."""
    target.set("", 0)
    x.focus(target.wid)
    time.sleep(1.0)
    requests, cpu = len(server.requests), cpu_s(daemon.process.pid)
    type_steady(press, (TEXT + " " + TEXT)[:100], rate=5.0)
    cpu = cpu_s(daemon.process.pid) - cpu
    time.sleep(1.5)  # the pause after the last key: one request (auto on)
    press(["Escape"])
    return len(server.requests) - requests, cpu


def report(
    overhead: list[float], cancel_ms: list[float], results: dict[str, tuple[int, float]]
) -> None:
    load = os.getloadavg()[0]
    print(f"load average (1 min): {load:.2f}")
    print(
        f"pause -> ghost painted, backend excluded: p50 {percentile(overhead, 0.5):.1f} ms, "
        f"p95 {percentile(overhead, 0.95):.1f} ms ({len(overhead)} runs)"
    )
    print(
        f"keystroke -> request cancelled (server saw the close): p50 "
        f"{percentile(cancel_ms, 0.5):.1f} ms, p95 {percentile(cancel_ms, 0.95):.1f} ms "
        f"({len(cancel_ms)} runs)"
    )
    # the two daemons share the server: while one types, the other's app is not focused
    print(
        f"requests per 100 characters at 5 chars/s: auto on {results['on'][0]}, "
        f"auto off {results['off'][0]} (steady typing, the pause after the last key included)"
    )
    ratio = results["on"][1] / results["off"][1] if results["off"][1] else float("nan")
    print(
        f"daemon CPU while typing 100 characters (20 s): auto on {results['on'][1]:.2f} s, "
        f"auto off {results['off'][1]:.2f} s (ratio {ratio:.2f})"
    )


if __name__ == "__main__":
    main()

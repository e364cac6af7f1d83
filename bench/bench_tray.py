"""The tray's costs, against `anyfill run --headless` in the same run.

Runs the real thing in a private Xvfb with a tray host (trayer), our PySide6 target and a
loopback llama.cpp responder that answers at once (so backend time is ~0 and what is
measured is anyfill's own path). One clock for every process (``time.monotonic()``):
the target stamps each text change, the popup stamps each paint in the daemon's log.

Printed:
- start -> ready (hotkeys grabbed; for the tray also the icon shown), headless vs tray, and
  the first completion press right after ready (hotkey -> inserted); with ``--baseline``
  the same for another anyfill tree, the starts interleaved in the same run;
- RSS after start and after the presses, headless vs tray;
- P1 (complete hotkey -> text in the app), headless vs tray: both run at once on their own
  hotkeys and the presses alternate, so both see the same load; and the ratio;
- preview hotkey -> popup painted ("thinking…") and -> first text painted, minus the
  backend's share (request received -> answered, from the loopback server);
- Tab -> text in the app.

    .venv/bin/python bench/bench_tray.py [--runs 30] [--starts 5]
        [--starts-only] [--first-press-after 0.5] [--baseline DIR] [--atspi]

``--atspi``: the session as GNOME, KDE and Xfce run it, with a session bus and the
accessibility bus (at-spi-bus-launcher), the target exposing its text: the capture then
reads over AT-SPI (each first press's capture route is printed).

``--baseline DIR``: DIR holds another anyfill source tree as ``DIR/anyfill`` (for example
``mkdir -p /tmp/base/anyfill && git archive main | tar -x -C /tmp/base/anyfill``); its
daemons run with ``PYTHONPATH=DIR``, each start right before the same start of this tree.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_hotkey_insert import changed_after, percentile, xtest_presser
from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

GOALS = {"start": 1000.0, "rss": 150.0, "preview": 50.0, "tab": 30.0}
PAINTED = re.compile(r"popup (\d+) painted (\d+) characters at ([\d.]+)")
TRAY_KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+o"
preview = "<ctrl>+<alt>+p"
cancel = "<ctrl>+<alt>+j"
"""
"""The tray daemon's own hotkeys: the headless one runs at the same time."""
BUS_LAUNCHER = Path("/usr/libexec/at-spi-bus-launcher")
CAPTURES: dict[str, list[str]] = {}
"""The capture route of each first press, per tree and front end."""
REFUSED: list[str] = []
"""Presses a guard refused (nothing inserted, nothing lost); reported, not timed."""
DEBUG = '[logging]\nlevel = "DEBUG"\nfile = false\n'


@dataclass
class Run:
    rss_start: float
    rss_end: float = 0.0
    p1: list[float] = field(default_factory=list)
    shown: list[float] = field(default_factory=list)
    text: list[float] = field(default_factory=list)
    tab: list[float] = field(default_factory=list)


def config(url: str) -> str:
    return daemon_config(url).replace('[logging]\nlevel = "INFO"\nfile = false\n', DEBUG)


ICON_SHOWN = re.compile(r"tray icon shown at ([\d.]+)")


def icon_shown_at(daemon: Daemon) -> float:
    match = ICON_SHOWN.search(daemon.log())
    if match is None:
        raise SystemExit("the tray icon was never shown: is the tray host running?")
    return float(match[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start(
    x: XSession, url: str, headless: bool, keys: str = "", tree: Path | None = None
) -> tuple[Daemon, float]:
    """A daemon of this tree (or of the one under ``tree``), and ms from spawn to ready."""
    began = time.monotonic()
    name = f"bench-{time.monotonic_ns()}"
    if tree is not None:
        x.env["PYTHONPATH"] = str(tree)
    try:
        daemon = Daemon(x, config(url) + keys, name=name, headless=headless)
    finally:
        x.env.pop("PYTHONPATH", None)
    return daemon, (time.monotonic() - began) * 1000


BUILT = re.compile(r"backends built at ([\d.]+)")


def built_at(daemon: Daemon) -> float | None:
    """When the backends were built (a tree that builds them after ready logs it)."""
    match = wait_until(lambda: BUILT.search(daemon.log()), 10, "the backends built")
    return float(match[1])


@dataclass
class Starts:
    """Start -> ready (headless and tray), the icon, the backends' build and the first
    press right after ready, for one tree."""

    ready: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})
    first: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})
    built: dict[bool, list[float]] = field(default_factory=lambda: {True: [], False: []})
    icon_ms: list[float] = field(default_factory=list)

    def one(
        self,
        x: XSession,
        url: str,
        target: QtTarget,
        headless: bool,
        tree: Path | None,
        args: argparse.Namespace,
        tag: str,
    ) -> None:
        began = time.monotonic()
        daemon, ms = start(x, url, headless, tree=tree)
        self.ready[headless].append(ms)
        if not headless:
            self.icon_ms.append((icon_shown_at(daemon) - began) * 1000)
        # The first press right after ready: work moved off the start path must not come
        # back as a slow (or failed) first completion.
        x.focus(target.wid)
        time.sleep(args.first_press_after)
        kind = "h" if headless else "t"
        press_ms = p1_press(x, daemon, target, ["Control_L", "Alt_L", "space"], f"f{kind}{tag}")
        front = "headless" if headless else "tray"
        CAPTURES.setdefault(f"{tree or 'this tree'}, {front}", []).append(
            daemon.outcomes()[-1].capture
        )
        if press_ms is not None:
            self.first[headless].append(press_ms)
        if BUILT.search(daemon.log()) or tree is None:
            self.built[headless].append((built_at(daemon) - began) * 1000)
        daemon.stop()

    def report(self, name: str) -> None:
        of = f" ({name})" if name else ""
        print(line(f"start -> ready, headless{of}", self.ready[True]))
        print(line(f"start -> ready, tray{of}", self.ready[False], GOALS["start"]))
        print(line(f"start -> tray icon shown (hotkeys not live yet){of}", self.icon_ms))
        if self.built[False]:
            print(line(f"start -> backends built, headless{of}", self.built[True]))
            print(line(f"start -> backends built, tray{of}", self.built[False]))
        print(line(f"first press right after ready -> inserted, headless{of}", self.first[True]))
        print(line(f"first press right after ready -> inserted, tray{of}", self.first[False]))


def p1_press(
    x: XSession, daemon: Daemon, target: QtTarget, keys: list[str], tag: str
) -> float | None:
    """One completion hotkey press; ms to the text in the app, None when a guard refused."""
    press = xtest_presser(x.display)
    text = f"Hello world {tag}"
    target.set(text, 6)
    time.sleep(0.1)
    count = len(daemon.outcomes())
    began = time.monotonic()
    press(keys)
    outcome = daemon.wait_outcome(count + 1)
    if outcome.status != "inserted":
        # A guard refused (e.g. a capture key handled late under load): nothing lost,
        # but no figure either; counted and shown.
        REFUSED.append(f"P1 {tag}: {outcome.status}: {outcome.reason}")
        return None
    seen = seen_or_dump(daemon, target, began, text[:6] + "big " + text[6:], f"P1 {tag}")
    return (seen - began) * 1000


def seen_or_dump(daemon: Daemon, target: QtTarget, since: float, text: str, what: str) -> float:
    """When the target shows ``text``; on a timeout, the daemon's log is kept for a look."""
    try:
        return changed_after(target, since, text)
    except TimeoutError:
        time.sleep(5)
        kept = Path(tempfile.gettempdir()) / f"bench_tray-{os.getpid()}.log"
        kept.write_text(daemon.log())
        raise SystemExit(f"{what}: the app shows {target.state()}; daemon log: {kept}") from None


def painted_after(daemon: Daemon, since: float, with_text: bool) -> float:
    def find() -> float:
        for match in PAINTED.finditer(daemon.log()):
            at = float(match[3])
            if at > since and (int(match[2]) > 0 or not with_text):
                return at
        return 0.0

    return wait_until(find, 5, "the popup to paint")


def preview(
    x: XSession, daemon: Daemon, target: QtTarget, server: LoopbackServer, runs: int
) -> tuple[list[float], list[float], list[float]]:
    press = xtest_presser(x.display)
    shown_ms, text_ms, tab_ms = [], [], []
    for run in range(runs + 2):
        text = f"Hello preview world {run}"
        target.set(text, 6)
        time.sleep(0.1)
        count, requests = len(daemon.outcomes()), len(server.requests)
        began = time.monotonic()
        press(["Control_L", "Alt_L", "p"])
        shown = painted_after(daemon, began, with_text=False)  # "thinking…" or text at once
        first = painted_after(daemon, began, with_text=True)
        wait_until(lambda n=requests: len(server.requests) > n, 5, "the request")
        request = server.requests[-1]
        # The backend's share: from the request fully read to the answer's end (its socket
        # closes right after the one chunk); the loopback answers at once, so this is small.
        backend = max((request.disconnected_at or request.at) - request.at, 0.0)
        time.sleep(0.05)
        tab = time.monotonic()
        press(["Tab"])
        outcome = daemon.wait_outcome(count + 1)
        if outcome.status != "inserted":
            REFUSED.append(f"preview run {run}: {outcome.status}: {outcome.reason}")
            continue
        seen = seen_or_dump(daemon, target, tab, text[:6] + "big " + text[6:], f"preview {run}")
        if run >= 2:
            shown_ms.append((shown - began) * 1000)
            text_ms.append((first - began - backend) * 1000)
            tab_ms.append((seen - tab) * 1000)
    return shown_ms, text_ms, tab_ms


def line(name: str, values: list[float], goal: float | None = None) -> str:
    p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
    note = f" (goal p50 <= {goal:.0f})" if goal is not None else ""
    return f"{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, n={len(values)}{note}"


@contextlib.contextmanager
def accessibility_bus(x: XSession) -> Iterator[None]:
    """A session bus and the accessibility bus for everything started in ``x`` after."""
    started = subprocess.run(
        ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
        env=x.env,
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    address, pid = started.stdout.split()[:2]
    x.env["DBUS_SESSION_BUS_ADDRESS"] = address
    x.env.pop("NO_AT_BRIDGE", None)
    x.env["QT_LINUX_ACCESSIBILITY_ALWAYS_ON"] = "1"
    launcher = x.spawn([str(BUS_LAUNCHER), "--launch-immediately"], "a11y.log")
    time.sleep(0.5)
    try:
        yield
    finally:
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument(
        "--starts-only",
        action="store_true",
        help="only start -> ready and the first press after each start (no P1/preview runs)",
    )
    parser.add_argument(
        "--first-press-after",
        type=float,
        default=0.0,
        help="seconds between ready and the first press (default 0: at once, the worst case)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a directory holding another anyfill tree as DIR/anyfill, started interleaved",
    )
    parser.add_argument(
        "--atspi", action="store_true", help="with a session bus and the accessibility bus"
    )
    args = parser.parse_args()
    if shutil.which("trayer") is None:
        raise SystemExit("needs trayer (a tray host): apt-get install trayer")
    responder = LlamaCpp(default=Reply(text="big ", chunks=["big "]))
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with (
        LoopbackServer.in_thread(responder) as server,
        XSession.start() as x,
        accessibility_bus(x) if args.atspi else contextlib.nullcontext(),
    ):
        host = x.spawn(["trayer", "--edge", "top", "--align", "right"], "trayer.log")
        x.find_window("trayer")
        target = QtTarget(x)
        x.set_clipboard("the user's clipboard")
        trees: dict[str, Path | None] = {"this tree": None}
        if args.baseline is not None:
            trees = {"baseline": args.baseline.resolve(), "this tree": None}
        starts = {name: Starts() for name in trees}
        for n in range(args.starts):
            for name, tree in trees.items():  # interleaved: each start sees the same load
                for headless in (True, False):
                    starts[name].one(x, server.url, target, headless, tree, args, f"{n}")
        if args.starts_only or args.baseline is not None:
            target.close()
            os.killpg(host.pid, signal.SIGTERM)
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            for name, of in starts.items():
                of.report(name if len(starts) > 1 else "")
            if args.baseline is not None:
                before = percentile(starts["baseline"].ready[False], 0.5)
                after = percentile(starts["this tree"].ready[False], 0.5)
                print(
                    f"ratio start -> tray ready, this tree / baseline (medians): "
                    f"{after / before:.2f}x"
                )
            for which, routes in CAPTURES.items():
                print(f"first-press capture routes, {which}: {routes}")
            print(f"presses a guard refused (not timed): {len(REFUSED)}")
            for refused in REFUSED:
                print(f"  {refused}")
            return
        # Both at once, each on its own hotkey, presses alternating: the same load for both.
        headless_daemon, _ = start(x, server.url, True)
        tray_daemon, _ = start(x, server.url, False, TRAY_KEYS)
        headless = Run(rss_start=rss_mb(headless_daemon.process.pid))
        tray = Run(rss_start=rss_mb(tray_daemon.process.pid))
        x.focus(target.wid)
        for n in range(args.runs + 2):  # two warm-up rounds
            for run, daemon, keys, tag in (
                (headless, headless_daemon, ["Control_L", "Alt_L", "space"], f"h{n}"),
                (tray, tray_daemon, ["Control_L", "Alt_L", "o"], f"t{n}"),
            ):
                ms = p1_press(x, daemon, target, keys, tag)
                if n >= 2 and ms is not None:
                    run.p1.append(ms)
        tray.shown, tray.text, tray.tab = preview(x, tray_daemon, target, server, args.runs)
        headless.rss_end = rss_mb(headless_daemon.process.pid)
        tray.rss_end = rss_mb(tray_daemon.process.pid)
        headless_daemon.stop()
        tray_daemon.stop()
        target.close()
        os.killpg(host.pid, signal.SIGTERM)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    starts["this tree"].report("")
    for kind, run in (("headless", headless), ("tray", tray)):
        print(f"RSS {kind}: {run.rss_start:.1f} MB after start, {run.rss_end:.1f} MB after presses")
    print(f"RSS goal with the tray: <= {GOALS['rss']:.0f} MB")
    print(line("P1 hotkey -> inserted, headless", headless.p1))
    print(line("P1 hotkey -> inserted, tray", tray.p1))
    ratio = percentile(tray.p1, 0.5) / percentile(headless.p1, 0.5)
    print(f"ratio P1 tray/headless (medians): {ratio:.2f}x")
    print(line("preview hotkey -> popup first painted", tray.shown))
    print(
        line("preview hotkey -> first text painted, backend excluded", tray.text, GOALS["preview"])
    )
    print(line("Tab -> text in the app", tray.tab, GOALS["tab"]))
    print(f"presses a guard refused (not timed): {len(REFUSED)}")
    for refused in REFUSED:
        print(f"  {refused}")


if __name__ == "__main__":
    main()

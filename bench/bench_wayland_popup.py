"""The preview popup on native Wayland (sway, layer surface) beside X11, in one run.

Two sessions at once: a private Xvfb and a sway headless, each with our PySide6 target
(on Qt's xcb and Wayland plugins) and `anyfill run` with the tray; one loopback llama.cpp
responder answers at once. Presses alternate between the two, so both see the same load.
One clock for every process (``time.monotonic()``): the target stamps each text change,
the popup stamps each paint (X11) or each image handed to the compositor (Wayland).

- preview trigger -> popup first painted: X11 from the XTEST key press; Wayland from the
  trigger sent on the control socket (what `anyfill trigger preview` sends; its process
  start is measured by bench/bench_wayland.py);
- Tab -> text in the app: X11 from the XTEST press, Wayland from starting `wtype -k Tab`
  (sway hands the bound key to us as an IPC event).

    .venv/bin/python bench/bench_wayland_popup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_hotkey_insert import changed_after, percentile, xtest_presser
from bench.bench_tray import TRAY_KEYS, config
from tests.e2e.harness import Daemon, QtTarget, XSession, wait_until
from tests.e2e.wayland import UNUSABLE, WaylandSession
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

SHOWN = {
    "x11": re.compile(r"popup (\d+) painted (\d+) characters at ([\d.]+)"),
    "wayland": re.compile(r"popup (\d+) presented (\d+) characters at ([\d.]+)"),
}
REFUSED: list[str] = []


def first_shown(daemon: Daemon, kind: str, since: float) -> float:
    def find() -> float:
        for match in SHOWN[kind].finditer(daemon.log()):
            if float(match[3]) > since:
                return float(match[3])
        return 0.0

    return wait_until(find, 5, "the popup to show")


def control_trigger(daemon: Daemon) -> Callable[[], None]:
    """Send ``trigger preview`` on the daemon's control socket, as `anyfill trigger` does."""
    from anyfill.daemon.control.client import call

    def send() -> None:
        saved = os.environ.get("XDG_RUNTIME_DIR")
        os.environ["XDG_RUNTIME_DIR"] = str(daemon.runtime_dir)
        try:
            call("trigger", {"action": "preview"})
        finally:
            if saved is not None:
                os.environ["XDG_RUNTIME_DIR"] = saved

    return send


def one_preview(
    daemon: Daemon,
    target: QtTarget,
    kind: str,
    trigger: Callable[[], None],
    tab: Callable[[], None],
    tag: str,
) -> tuple[float, float] | None:
    text = f"Hello preview world {tag}"
    target.set(text, 6)
    time.sleep(0.1)
    count = len(daemon.outcomes())
    began = time.monotonic()
    trigger()
    shown = first_shown(daemon, kind, began)
    wait_until(lambda: " characters (final)" in daemon.log().rsplit(" shown at ", 1)[-1], 5, "text")
    time.sleep(0.05)
    pressed = time.monotonic()
    tab()
    outcome = daemon.wait_outcome(count + 1)
    if outcome.status != "inserted":
        REFUSED.append(f"{kind} {tag}: {outcome.status}: {outcome.reason}")
        return None
    seen = changed_after(target, pressed, text[:6] + "big " + text[6:])
    return (shown - began) * 1000, (seen - pressed) * 1000


def line(name: str, values: list[float]) -> str:
    p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
    return f"{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, n={len(values)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if UNUSABLE:
        raise SystemExit(UNUSABLE)
    responder = LlamaCpp(default=Reply(text="big ", chunks=["big "]))
    figures: dict[str, tuple[list[float], list[float]]] = {"x11": ([], []), "wayland": ([], [])}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with (
        LoopbackServer.in_thread(responder) as server,
        XSession.start() as x,
        WaylandSession.start() as wl,
    ):
        x_target = QtTarget(x)
        x.focus(x_target.wid)
        x_daemon = Daemon(x, config(server.url) + TRAY_KEYS, name="bench-x11", headless=False)
        wl_target = QtTarget(wl, "bench-wl-target")  # type: ignore[arg-type]
        wait_until(lambda: wl.focused_window().get("pid") == wl_target.process.pid, 10, "focus")
        wl_daemon = Daemon(wl, config(server.url), "bench-wl", headless=False)  # type: ignore[arg-type]
        press = xtest_presser(x.display)
        sessions = {
            "x11": (
                x_daemon,
                x_target,
                lambda: press(["Control_L", "Alt_L", "p"]),
                lambda: press(["Tab"]),
            ),
            "wayland": (
                wl_daemon,
                wl_target,
                control_trigger(wl_daemon),
                lambda: wl.run("wtype", "-k", "Tab"),
            ),
        }
        for n in range(args.runs + 2):  # two warm-up rounds
            for kind, (daemon, target, trigger, tab) in sessions.items():
                measured = one_preview(daemon, target, kind, trigger, tab, f"{kind}{n}")
                if n >= 2 and measured is not None:
                    figures[kind][0].append(measured[0])
                    figures[kind][1].append(measured[1])
        for daemon in (x_daemon, wl_daemon):
            daemon.stop()
        x_target.close()
        wl_target.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    for kind, (shown, tab) in figures.items():
        print(line(f"preview trigger -> popup painted, {kind}", shown))
        print(line(f"Tab -> text in the app, {kind}", tab))
    print(f"presses a guard refused (not timed): {len(REFUSED)}")
    for refused in REFUSED:
        print(f"  {refused}")


if __name__ == "__main__":
    main()

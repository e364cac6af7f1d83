"""Trigger -> text inserted in native Wayland Mousepad on KDE's KWin, beside the same
measure on sway in the same run (the focus guard asks KWin there, sway's IPC here), with a
zero-latency backend. Process start included, as in bench_wayland.py:

- trigger: ``anyfill trigger complete`` from spawn to exit (the daemon acted on it);
- inserted: ``anyfill trigger complete --wait`` from spawn to exit (text in the document,
  read back through AT-SPI, outcome reported).

    .venv/bin/python bench/bench_kde_insert.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_wayland import measure, percentile, row
from tests.e2e.harness import Daemon, daemon_config, wait_until
from tests.e2e.kde import UNUSABLE as KDE_UNUSABLE
from tests.e2e.kde import KdeSession
from tests.e2e.wayland import UNUSABLE as SWAY_UNUSABLE
from tests.e2e.wayland import WaylandSession, open_mousepad
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply


def on_kwin(server: LoopbackServer, runs: int) -> tuple[list[float], list[float], set[str]]:
    with KdeSession.start() as kde:
        daemon = Daemon(kde, daemon_config(server.url), "bench-kde", runtime_dir=kde.run_dir)  # type: ignore[arg-type]
        path = kde.workdir / "bench.txt"
        path.write_text("alpha beta gamma\n", encoding="utf-8")
        process = kde.spawn(
            ["mousepad", "--opening-mode=window", "--line=1", "--column=6", str(path)],
            "mousepad.log",
        )
        try:
            window = kde.wait_new_active(set(), "the Mousepad window")
            if window.get("app") != "mousepad":
                raise SystemExit(f"the active window is not Mousepad: {window}")
            wait_until(lambda: "KWin reports the active window" in daemon.log(), 10, "KWin")
            acted, inserted = measure(daemon, runs)
            return acted, inserted, {o.method for o in daemon.outcomes()}
        finally:
            daemon.stop()
            process.terminate()
            process.wait(10)


def on_sway(server: LoopbackServer, runs: int) -> tuple[list[float], list[float], set[str]]:
    with WaylandSession.start() as wl:
        daemon = Daemon(wl, daemon_config(server.url), "bench-sway", runtime_dir=wl.run_dir)  # type: ignore[arg-type]
        editor = open_mousepad(wl, "alpha beta gamma\n", 1, 6)
        try:
            acted, inserted = measure(daemon, runs)
            return acted, inserted, {o.method for o in daemon.outcomes()}
        finally:
            daemon.stop()
            editor.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if KDE_UNUSABLE or SWAY_UNUSABLE:
        raise SystemExit(KDE_UNUSABLE or SWAY_UNUSABLE)
    responder = LlamaCpp(default=Reply(text="big ", chunks=["big "]))
    with LoopbackServer.in_thread(responder) as server:
        kde_acted, kde_inserted, kde_methods = on_kwin(server, args.runs)
        sway_acted, sway_inserted, sway_methods = on_sway(server, args.runs)
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"insertion by: KWin {sorted(kde_methods)}, sway {sorted(sway_methods)}")
    print(row("KWin trigger -> daemon acted", kde_acted))
    print(row("sway trigger -> daemon acted", sway_acted))
    print(row("KWin trigger -> inserted (native Wayland Mousepad)", kde_inserted))
    print(row("sway trigger -> inserted (native Wayland Mousepad)", sway_inserted))
    print(
        "KWin/sway inserted (medians): "
        f"{percentile(kde_inserted, 0.5) / percentile(sway_inserted, 0.5):.2f}x"
    )


if __name__ == "__main__":
    main()

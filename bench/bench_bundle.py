"""The PyInstaller bundle against the pip-installed anyfill, in the same run.

Measures, for each of the two (the bundle built by ``packaging/build-bundle OUT`` and the
wheel in the fresh venv that built it):
- ``anyfill version``: process start to exit (the cost of every short command);
- ``anyfill run --headless`` under a private Xvfb against a loopback llama.cpp responder:
  start until ``anyfill status`` answers (what a user waits for after log-in);
and prints the medians, the bundle/venv ratios, and the bundle's size on disk.

    .venv/bin/python bench/bench_bundle.py OUT [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.harness import XSession, daemon_config
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp


def timed_version(program: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([program, "version"], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def timed_ready(program: str, session: XSession, config: Path, run_dir: Path) -> float:
    env = {**session.env, "XDG_RUNTIME_DIR": str(run_dir)}
    started = time.perf_counter()
    daemon = session.spawn([program, "--config", str(config), "run", "--headless"], "d.log", env)
    try:
        deadline = started + 60
        while time.perf_counter() < deadline:
            probe = subprocess.run([program, "status"], env=env, capture_output=True, check=False)
            if probe.returncode == 0:
                return time.perf_counter() - started
            time.sleep(0.02)
        raise TimeoutError((session.workdir / "d.log").read_text())
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)


def size_mb(folder: Path) -> float:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path, help="packaging/build-bundle's output folder")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    programs = {
        "bundle": str(args.out / "bundle" / "anyfill" / "anyfill"),
        "venv": str(args.out / "venv" / "bin" / "anyfill"),
    }
    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}
    version: dict[str, list[float]] = {name: [] for name in programs}
    ready: dict[str, list[float]] = {name: [] for name in programs}
    with LoopbackServer.in_thread(LlamaCpp()) as server, XSession.start() as session:
        config = session.workdir / "config.toml"
        config.write_text(daemon_config(server.url))
        for run in range(args.runs):
            for name, program in programs.items():  # interleaved: load changes hit both
                version[name].append(timed_version(program, env))
                run_dir = session.workdir / f"run-{name}-{run}"
                run_dir.mkdir(mode=0o700)
                ready[name].append(timed_ready(program, session, config, run_dir))
    print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} runs each")
    for label, figures in (("anyfill version", version), ("run --headless to ready", ready)):
        bundle = statistics.median(figures["bundle"]) * 1000
        venv = statistics.median(figures["venv"]) * 1000
        print(
            f"{label:>24}: bundle {bundle:7.0f} ms, venv {venv:7.0f} ms, ratio {bundle / venv:.2f}"
        )
    print(f"bundle size: {size_mb(args.out / 'bundle' / 'anyfill'):.0f} MB on disk")


if __name__ == "__main__":
    main()

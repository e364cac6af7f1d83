"""``anyfill eval`` wall time for the 1033 single-line problems, in one run.

Each row runs ``anyfill eval --json`` as a subprocess (interpreter start, data load, the
engine, scoring, the summary: what a user waits for) and takes its wall time:

- ``loopback``: all 1033 against a loopback llama.cpp server that answers the canonical
  solutions from an answer key (tests/servers/humaneval.py), answering at once: anyfill's
  own cost per problem (the baseline of the ratios);
- ``startup``: ``--limit 1`` against the same server: the fixed cost of one run;
- ``execute``: ``loopback`` with ``--execute``: every problem's test run in the sandbox;
- ``tiny`` and ``tiny-execute``: the real ``llama-server`` with the tests' tiny FIM model
  (random weights; what tests/integration/evaluation/test_eval_tiny_model.py starts: one
  thread, 2 slots of 2048 tokens), ``temperature = 0``, ``--max-tokens 16``, without and
  with ``--execute``; ``tiny-default``: without ``--max-tokens`` (the backend's default, 128
  tokens). Skipped without ``ANYFILL_LLAMA_ASSETS``.

Prints every run's seconds, the median, the eval's own ``wall_s`` (the completions only, tests
excluded), the ratio of the median to the ``loopback`` median, and the load average before
and after each row.

    python -m bench.eval_wall [--runs 3] [--tiny-runs 2] [--rows loopback,startup,execute,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from anyfill.daemon.evaluation.problems import load_problems
from tests.llm.server import TINY_FIM_MODEL, LlamaServer, find_assets
from tests.servers.http import LoopbackServer
from tests.servers.humaneval import AnswerKey, canonical

ROWS = ("loopback", "startup", "execute", "tiny", "tiny-execute", "tiny-default")


def _config(folder: Path, url: str, *, temperature: bool) -> Path:
    config = folder / "anyfill.toml"
    config.write_text(
        f'[[backends]]\nname = "box"\ntype = "llamacpp"\nurl = "{url}"\n'
        + ("temperature = 0.0\n" if temperature else "")
        + '[routing]\ndefault = ["box"]\n[logging]\nfile = false\n'
    )
    return config


def _env(config: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANYFILL_")}
    env["ANYFILL_CONFIG"] = str(config)
    env["HOME"] = str(home)
    env["XDG_STATE_HOME"] = str(home / "state")
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
    return env


def _eval(config: Path, home: Path, args: list[str]) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.cli", "eval", "--json", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=_env(config, home),
    )
    took = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"anyfill eval {' '.join(args)} exited {run.returncode}:\n{run.stderr}")
    (row,) = json.loads(run.stdout)["backends"]
    return took, row


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextmanager
def _server(row: str) -> Iterator[str]:
    if row.startswith("tiny"):
        assets = find_assets()
        assert assets is not None
        with LlamaServer(
            Path(assets) / TINY_FIM_MODEL, ctx_size=4096, extra_args=("-t", "1")
        ) as server:
            yield server.url
    else:
        key = AnswerKey(load_problems("single-line"), canonical)
        with LoopbackServer.in_thread(key) as server:
            yield server.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per loopback row")
    parser.add_argument("--tiny-runs", type=int, default=2, help="runs per tiny-model row")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    options = parser.parse_args()
    rows = [row for row in options.rows.split(",") if row]
    if any(row.startswith("tiny") for row in rows) and find_assets() is None:
        print("no ANYFILL_LLAMA_ASSETS: the tiny-model rows are skipped")
        rows = [row for row in rows if not row.startswith("tiny")]
    print(f"cpus {os.cpu_count()}, python {sys.version.split()[0]}")
    print(
        f"{'row':14} {'runs':>4} {'median s':>9} {'min s':>7} {'eval wall_s':>11} "
        f"{'EM %':>6} {'pass@1':>6} {'x loopback':>10}  load before -> after; every run s"
    )
    baseline: float | None = None
    for row in rows:
        runs = options.tiny_runs if row.startswith("tiny") else options.runs
        args = [] if row != "startup" else ["--limit", "1"]
        if row in ("execute", "tiny-execute"):
            args.append("--execute")
        if row in ("tiny", "tiny-execute"):
            args += ["--max-tokens", "16"]
        before = _load()
        times: list[float] = []
        walls: list[float] = []
        last: dict[str, object] = {}
        with tempfile.TemporaryDirectory() as tmp, _server(row) as url:
            config = _config(Path(tmp), url, temperature=row.startswith("tiny"))
            for _ in range(runs):
                took, last = _eval(config, Path(tmp), args)
                times.append(took)
                walls.append(float(last["wall_s"]))  # type: ignore[arg-type]
        median = statistics.median(times)
        if row == "loopback":
            baseline = median
        ratio = f"{median / baseline:10.2f}" if baseline else f"{'-':>10}"
        pass_at_1 = last["pass_at_1"]
        print(
            f"{row:14} {runs:4} {median:9.2f} {min(times):7.2f} "
            f"{statistics.median(walls):11.2f} {last['exact_match']:6.1f} "
            f"{'-' if pass_at_1 is None else f'{pass_at_1:.1f}':>6} {ratio}  "
            f"{before} -> {_load()}; {', '.join(f'{t:.2f}' for t in times)}",
            flush=True,
        )


if __name__ == "__main__":
    main()

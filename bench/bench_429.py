"""``anyfill complete --jsonl`` against a loopback llama-server that answers every request
with 429: requests per line, requests per second and seconds per line.

    python bench/bench_429.py [--lines 3] [--timeout 400]

Two runs: the 429 with ``Retry-After: 0``, and without the header (the scheduler's own
pause). A run still going at ``--timeout`` is stopped and reported as such (the lines
written by then are counted). Run it with ``PYTHONPATH`` pointing at another checkout to
measure that one (the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.servers import LlamaCpp, Reply  # noqa: E402
from tests.servers.http import LoopbackServer  # noqa: E402

COMPLETION_PATHS = {"/infill", "/completion", "/v1/completions"}


def run(lines: int, retry_after: str | None, timeout: float) -> None:
    reply = Reply(error="rate_limit", retry_after=retry_after)
    with (
        LoopbackServer.in_thread(LlamaCpp(default=reply)) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        config = Path(tmp) / "anyfill.toml"
        config.write_text(
            f'[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "{server.url}"\n'
            '[routing]\ndefault = ["local"]\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANYFILL_")}
        env["ANYFILL_CONFIG"] = str(config)
        env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
        stdin = "".join(
            json.dumps({"id": i, "prefix": f"v{i} = ", "suffix": "\n"}) + "\n" for i in range(lines)
        )
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "anyfill.daemon.cli", "complete", "--jsonl", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            out, _ = proc.communicate(stdin, timeout=timeout)
            finished = True
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            finished = False
        elapsed = time.monotonic() - started
        # Completion requests only: the first one is preceded by the plan's probes.
        requests = len([r for r in server.requests if r.path in COMPLETION_PATHS])
    written = [json.loads(line) for line in out.splitlines() if line.strip()]
    header = "Retry-After: 0" if retry_after == "0" else "no Retry-After"
    state = "finished" if finished else f"stopped at {timeout:.0f} s"
    print(
        f"{header}: {lines} lines, {state} after {elapsed:.1f} s, {len(written)} lines written; "
        f"{requests} requests = {requests / lines:.1f} per line, {requests / elapsed:.2f}/s, "
        f"{elapsed / max(1, len(written)):.1f} s per written line"
    )
    if written:
        print(f"  first error: {written[0].get('error')}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=400)
    args = parser.parse_args()
    run(args.lines, "0", args.timeout)
    run(args.lines, None, args.timeout)

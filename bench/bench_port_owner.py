"""The managed server's port-ownership check: its cost per call and at a start.

    python bench/bench_port_owner.py [--assets DIR] [--runs 5] [--calls 2000]

Uses the tests' llama-server and tiny FIM GGUF (``ANYFILL_LLAMA_ASSETS`` or
``.venv/llama-assets``). Prints, measured in this run:

- one ``port_owner()`` call against the running child (``/proc/net/tcp{,6}`` and the
  child's fds), median and 95th percentile over ``--calls``;
- per start (daemon-side ``ready_url`` from nothing to ready): the time to ready, how many
  checks it made (one per ``/health`` poll, 50 ms apart, and one at ready) and their total
  cost, as a share of the start.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyfill.daemon.managed.supervisor as supervisor_module  # noqa: E402
from anyfill.config.model import BackendConfig  # noqa: E402
from anyfill.daemon.managed.ownership import PortOwner, port_owner  # noqa: E402
from anyfill.daemon.managed.supervisor import LlamaServerSupervisor  # noqa: E402
from bench.managed import assets_dir  # noqa: E402
from tests.llm.server import SERVER_BINARY, TINY_FIM_MODEL  # noqa: E402


def config(assets: Path) -> BackendConfig:
    return BackendConfig.model_validate(
        {
            "name": "managed",
            "type": "llamacpp-managed",
            "model": str(assets / TINY_FIM_MODEL),
            "server": {"binary": str(assets / SERVER_BINARY), "context_size": 1024},
        }
    )


async def one_start(assets: Path, logs: Path) -> tuple[float, int, float, list[float]]:
    spent: list[float] = []

    def timed(port: int, pid: int) -> PortOwner:
        started = time.perf_counter()
        try:
            return port_owner(port, pid)
        finally:
            spent.append(time.perf_counter() - started)

    supervisor_module.port_owner = timed  # the supervisor's own calls, timed
    supervisor = LlamaServerSupervisor(config(assets), logs=logs)
    try:
        started = time.perf_counter()
        url = await supervisor.ready_url(60)
        ready = time.perf_counter() - started
        checks, cost = len(spent), sum(spent)
        assert supervisor.process is not None
        port, pid = int(url.rsplit(":", 1)[1]), supervisor.process.pid
        calls = []
        for _ in range(ARGS.calls):
            t = time.perf_counter()
            port_owner(port, pid)
            calls.append(time.perf_counter() - t)
        return ready, checks, cost, calls
    finally:
        supervisor_module.port_owner = port_owner
        await supervisor.aclose()


async def main() -> None:
    assets = assets_dir(ARGS.assets)
    logs = Path("/tmp/anyfill-bench-port-owner")
    readies, shares, all_calls = [], [], []
    for run in range(ARGS.runs):
        ready, checks, cost, calls = await one_start(assets, logs)
        readies.append(ready)
        shares.append(cost / ready)
        all_calls += calls
        print(
            f"start {run + 1}: ready in {ready * 1000:.0f} ms; {checks} checks, "
            f"{cost * 1000:.2f} ms in all ({cost / ready:.2%} of the start)"
        )
    all_calls.sort()
    p95 = all_calls[int(len(all_calls) * 0.95)]
    print(
        f"one check: median {statistics.median(all_calls) * 1e6:.0f} us, p95 {p95 * 1e6:.0f} us "
        f"({len(all_calls)} calls); start: median {statistics.median(readies) * 1000:.0f} ms, "
        f"checks {statistics.median(shares):.2%} of it"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    ARGS = parser.parse_args()
    asyncio.run(main())

"""The managed llama-server: start-up to first completion, added latency, child RSS.

    python bench/managed.py [--assets DIR] [--runs 5] [--requests 40]

Uses the tests' llama-server and tiny FIM GGUF (``ANYFILL_LLAMA_ASSETS`` or
``.venv/llama-assets``). Prints, all measured in this run:

1. daemon start -> server ready, and the first completion when the hotkey is pressed at once
   or 1 s after the daemon started, with the server started at daemon start (the default)
   or at the first request ("cold": the process starts and loads the model, whose file is in
   the page cache after the first run), and the next completion ("warm");
2. per-request latency through the managed backend against the ``llamacpp`` backend on a
   llama-server started by hand with the same arguments, requests interleaved;
3. the RSS of the managed child after start and after the requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anyfill.config.model import BackendConfig, RoutingConfig, Settings  # noqa: E402
from anyfill.daemon.completion import CompletionRequest  # noqa: E402
from anyfill.daemon.context import Context  # noqa: E402
from anyfill.daemon.engine.engine import Engine  # noqa: E402
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend  # noqa: E402
from anyfill.daemon.managed.prestart import start_managed_servers  # noqa: E402
from tests.llm.server import SERVER_BINARY, TINY_FIM_MODEL, LlamaServer  # noqa: E402

CTX = 2048


def assets_dir(given: str | None) -> Path:
    value = given or os.environ.get("ANYFILL_LLAMA_ASSETS", "")
    if not value and (REPO / ".venv" / "llama-assets").is_file():
        value = (REPO / ".venv" / "llama-assets").read_text().strip()
    if not value:
        raise SystemExit("no assets: pass --assets or set ANYFILL_LLAMA_ASSETS")
    return Path(value)


def managed_settings(assets: Path, start: str) -> Settings:
    config = BackendConfig.model_validate(
        {
            "name": "managed",
            "type": "llamacpp-managed",
            "model": str(assets / TINY_FIM_MODEL),
            "max_tokens": 8,
            "server": {
                "binary": str(assets / SERVER_BINARY),
                "context_size": CTX,
                "start": start,
                "args": ["--parallel", "2"],
            },
        }
    )
    return Settings(backends=[config], routing=RoutingConfig(default=["managed"]))


def by_hand_settings(url: str) -> Settings:
    config = BackendConfig(name="mine", type="llamacpp", url=url, max_tokens=8)
    return Settings(backends=[config], routing=RoutingConfig(default=["mine"]))


def request(n: int) -> CompletionRequest:
    context = Context(prefix=f"def f_{n}(a, b):\n    return ", suffix="\n\nprint(f(1, 2))\n")
    return CompletionRequest(id=f"r{n}", context=context, max_tokens=8)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def first_completion(
    assets: Path, start: str, logs: Path, press_after: float
) -> tuple[float, float]:
    """(ms of the first completion, measured from the hotkey press ``press_after`` seconds
    after the daemon started, ms of the next one on the running server)."""
    async with Engine(managed_settings(assets, start)) as engine:
        backend = engine.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = logs
        await start_managed_servers(engine.backends, engine.settings)  # as the daemon does
        await asyncio.sleep(press_after)
        began = time.perf_counter()
        await engine.complete(request(0))
        first = (time.perf_counter() - began) * 1000
        began = time.perf_counter()
        await engine.complete(request(1))
        warm = (time.perf_counter() - began) * 1000
    return first, warm


async def ready_after_start(assets: Path, logs: Path) -> float:
    began = time.perf_counter()
    async with Engine(managed_settings(assets, "daemon")) as engine:
        backend = engine.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = logs
        await start_managed_servers(engine.backends, engine.settings)
        await backend.supervisor.ready_url(60)
        return (time.perf_counter() - began) * 1000


async def timed(engine: Engine, n: int) -> float:
    began = time.perf_counter()
    await engine.complete(request(n))
    return (time.perf_counter() - began) * 1000


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"median {statistics.median(values):6.1f} ms  p90 {p90:6.1f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    assets = assets_dir(args.assets)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "anyfill-bench-managed"
    print(f"load average at start: {os.getloadavg()}")

    print("\n1. daemon start -> first completion (tiny model, a fresh server each run)")
    # Every case once per round, so that the machine's load drifts over all of them alike.
    cases = [(press, start) for press in (0.0, 1.0) for start in ("daemon", "request")]
    readies: list[float] = []
    firsts: dict[tuple[float, str], list[float]] = {case: [] for case in cases}
    warms: dict[tuple[float, str], list[float]] = {case: [] for case in cases}
    for _ in range(args.runs):
        readies.append(await ready_after_start(assets, logs))
        for press, start in cases:
            first, warm = await first_completion(assets, start, logs, press)
            firsts[press, start].append(first)
            warms[press, start].append(warm)
    print(f"   daemon start -> server ready (start=daemon): {summary(readies)}")
    for press, start in cases:
        print(
            f"   press {press:.0f} s after start, start={start:<8} "
            f"first: {summary(firsts[press, start])}   next (warm): {summary(warms[press, start])}"
        )

    print("\n2. per request: managed backend vs llama-servers started by hand (rotating order)")
    hand_args = {"ctx_size": CTX, "parallel": 2, "binary": assets / SERVER_BINARY}
    with (
        LlamaServer(assets / TINY_FIM_MODEL, **hand_args) as by_hand,  # type: ignore[arg-type]
        LlamaServer(assets / TINY_FIM_MODEL, **hand_args) as control,  # type: ignore[arg-type]
    ):
        async with (
            Engine(managed_settings(assets, "daemon")) as managed,
            Engine(by_hand_settings(by_hand.url)) as mine,
            Engine(by_hand_settings(control.url)) as other,
        ):
            backend = managed.backends["managed"]
            assert isinstance(backend, ManagedLlamaCppBackend)
            backend.supervisor.logs = logs
            await backend.supervisor.ready_url(60)
            assert backend.supervisor.process is not None
            pid = backend.supervisor.process.pid
            rss_start = rss_mb(pid)
            engines = [managed, mine, other]
            for n in range(3):  # warm all three (connections, prompt cache)
                for engine in engines:
                    await timed(engine, n)
            times: list[list[float]] = [[], [], []]
            for n in range(args.requests):  # each goes first, second and third in turn
                for k in range(3):
                    which = (n + k) % 3
                    times[which].append(await timed(engines[which], 100 + n))
            ours, theirs, control_times = times
            print(f"   managed            : {summary(ours)}")
            print(f"   by hand            : {summary(theirs)}")
            print(f"   by hand (control)  : {summary(control_times)}")
            for label, sample in (("managed", ours), ("control", control_times)):
                diffs = [a - b for a, b in zip(sample, theirs, strict=True)]
                ratio = statistics.median(sample) / statistics.median(theirs)
                print(
                    f"   {label} - by hand: median {statistics.median(diffs):+.2f} ms per "
                    f"request (ratio of medians {ratio:.3f})"
                )
            supervisor = backend.supervisor
            began = time.perf_counter()
            for _ in range(10_000):
                await supervisor.ready_url(60)
            check_us = (time.perf_counter() - began) * 100  # per call, in microseconds
            print(f"   the managed path's own step (is the server ready?): {check_us:.2f} us")
            print("\n3. RSS of the managed llama-server (tiny model)")
            print(
                f"   after start {rss_start:.1f} MB, after {args.requests + 3} requests "
                f"{rss_mb(pid):.1f} MB; by hand: {rss_mb(by_hand._proc.pid):.1f} MB"  # type: ignore[union-attr]
            )
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())

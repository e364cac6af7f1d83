"""The prebuilt runtime (the ``local`` extra, xllamacpp) against the compiled llama-server,
both run by the managed backend in this one process, with the tests' tiny FIM model.

    VENV/bin/python bench/bench_prebuilt.py --assets DIR [--runs 5] [--requests 40] [--model F]

VENV is one where ``anyfill[local]`` is installed (a fresh one from the wheel, as a user's);
DIR holds ``llama-server`` and ``tiny-fim.gguf`` (``cat .venv/llama-assets``). Prints, both
runtimes measured in turn in the same run:

1. managed start -> server ready, and the first completion on the fresh server;
2. per request (interleaved, each runtime first in turn): ms per request and generated
   tokens per second (``ignore_eos``, so every request generates ``--tokens`` tokens);
3. the ratios prebuilt / compiled.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import tempfile
import time
from pathlib import Path

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend

CTX = 2048
KINDS = ("compiled", "prebuilt")


def settings(
    kind: str, assets: Path, tokens: int, model: str = "tiny-fim.gguf", template: str = "auto"
) -> Settings:
    binary = str(assets / "llama-server") if kind == "compiled" else ""
    config = BackendConfig.model_validate(
        {
            "name": "managed",
            "type": "llamacpp-managed",
            "model": str(assets / model),
            "template": template,
            "max_tokens": tokens,
            "options": {"ignore_eos": True},
            "server": {"binary": binary, "context_size": CTX, "start": "request"},
        }
    )
    return Settings(backends=[config], routing=RoutingConfig(default=["managed"]))


def request(n: int, tokens: int) -> CompletionRequest:
    context = Context(prefix=f"def f_{n}(a, b):\n    return ", suffix="\n\nprint(f(1, 2))\n")
    return CompletionRequest(id=f"r{n}", context=context, max_tokens=tokens)


async def timed(engine: Engine, n: int, tokens: int) -> tuple[float, int]:
    began = time.perf_counter()
    done = await engine.complete(request(n, tokens))
    return (time.perf_counter() - began) * 1000, done.usage.completion_tokens


def summary(values: list[float], unit: str = "ms") -> str:
    """Median and the bad tail: p90 of times, p10 of rates."""
    ordered = sorted(values, reverse=unit != "ms")
    tail = ordered[int(0.9 * (len(ordered) - 1))]
    name = "p90" if unit == "ms" else "p10"
    return f"median {statistics.median(values):7.1f} {unit}  {name} {tail:7.1f} {unit}"


def backend_of(engine: Engine) -> ManagedLlamaCppBackend:
    backend = engine.backends["managed"]
    assert isinstance(backend, ManagedLlamaCppBackend)
    return backend


async def start_and_first(
    kind: str, assets: Path, logs: Path, tokens: int, model: str, template: str
) -> tuple[float, float]:
    """(ms from the first request to the server ready, ms of that first completion)."""
    async with Engine(settings(kind, assets, tokens, model, template)) as engine:
        backend = backend_of(engine)
        backend.supervisor.logs = logs
        began = time.perf_counter()
        await backend.supervisor.ready_url(60)
        ready = (time.perf_counter() - began) * 1000
        first, _ = await timed(engine, 0, tokens)
        source = backend.supervisor.last_event.detail
        assert backend.supervisor.state == "ready", source
    return ready, first


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--assets", required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--template", default="auto", help="e.g. starcoder for smollm2")
    parser.add_argument(
        "--model",
        default="tiny-fim.gguf",
        help="a GGUF in --assets (smollm2-135m.gguf: a real model)",
    )
    args = parser.parse_args()
    if importlib.util.find_spec("xllamacpp") is None:
        raise SystemExit("xllamacpp is not installed here: run this with anyfill[local]'s python")
    assets = Path(args.assets)
    # The prebuilt runtime is what the managed backend uses when no llama-server is found:
    # none on PATH and no anyfill build (the compiled one is named by its path instead).
    os.environ["PATH"] = "/usr/bin:/bin"
    os.environ["ANYFILL_LLAMA_CACHE"] = tempfile.mkdtemp(prefix="no-llama-build-")
    logs = Path(tempfile.mkdtemp(prefix="anyfill-bench-prebuilt-"))
    print(f"load average at start: {os.getloadavg()}")

    print(f"\n1. first request -> server ready, then its first completion ({args.runs} runs)")
    readies: dict[str, list[float]] = {k: [] for k in KINDS}
    firsts: dict[str, list[float]] = {k: [] for k in KINDS}
    for run in range(args.runs):
        for kind in KINDS if run % 2 == 0 else KINDS[::-1]:
            ready, first = await start_and_first(
                kind, assets, logs, args.tokens, args.model, args.template
            )
            readies[kind].append(ready)
            firsts[kind].append(first)
    for kind in KINDS:
        print(f"   {kind:<9} ready: {summary(readies[kind])}   first: {summary(firsts[kind])}")

    print(f"\n2. per request, {args.requests} each, {args.tokens} tokens, interleaved")
    async with (
        Engine(settings("compiled", assets, args.tokens, args.model, args.template)) as compiled,
        Engine(settings("prebuilt", assets, args.tokens, args.model, args.template)) as prebuilt,
    ):
        engines = {"compiled": compiled, "prebuilt": prebuilt}
        for kind, engine in engines.items():
            backend_of(engine).supervisor.logs = logs
            await backend_of(engine).supervisor.ready_url(60)
            detail = backend_of(engine).supervisor.last_event
            argv = Path(f"/proc/{detail.pid}/cmdline").read_bytes().split(b"\0")  # noqa: ASYNC240
            program = " ".join(a.decode() for a in argv[:3])
            print(f"   {kind}: pid {detail.pid} runs {program}; {detail.detail}")
        for n in range(3):  # warm both (connections, prompt cache)
            for engine in engines.values():
                await timed(engine, n, args.tokens)
        ms: dict[str, list[float]] = {k: [] for k in KINDS}
        rates: dict[str, list[float]] = {k: [] for k in KINDS}
        for n in range(args.requests):
            order = KINDS if n % 2 == 0 else KINDS[::-1]
            for kind in order:
                took, generated = await timed(engines[kind], 100 + n, args.tokens)
                ms[kind].append(took)
                rates[kind].append(generated * 1000 / took)
        for kind in KINDS:
            print(f"   {kind:<9} {summary(ms[kind])}   tokens/s {summary(rates[kind], 'tok/s')}")
    print("\n3. prebuilt / compiled (ratio of medians)")
    for label, table in (
        ("ready", readies),
        ("first completion", firsts),
        ("ms per request", ms),
        ("tokens/s", rates),
    ):
        ratio = statistics.median(table["prebuilt"]) / statistics.median(table["compiled"])
        print(f"   {label:<17} {ratio:.2f}x")
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())

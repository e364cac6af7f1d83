"""``anyfill complete --jsonl`` per line against single requests, in one run, one server.

A loopback llama.cpp server whose model no FIM family fits by name or tokens (``/infill``
works, the template detection fails): the batch path asks for a template for every small
batch, the single path never needs one. Both run the engine in-process against the same
server; the figure is the batch's time per line over the single requests' time per request.
Before the fix every batch probed ``/props`` and ``/tokenize`` again (200 and 2,400 for 400
lines; the issue reported about 15 times slower per line; this bench measured a ratio of 4.1
before and 1.5 after, at load 12-14: docs/backends.md).

The batch path also waits the scheduler's batching window (4 ms) per small batch, which
only shows against a server that answers in about a millisecond; ``DELAY_MS`` makes the
server take that long per answer, like a model would.

    python -m bench.complete_jsonl [LINES] [DELAY_MS] [RUNS]

Each run starts a new server and engine (nothing detected yet) and prints one line; the load
average is printed before the first and after the last. To measure another checkout's code
(the baseline before a fix), put a folder first on ``PYTHONPATH`` that holds ``anyfill/``
with ``daemon``, ``config``, ``ui`` and ``assets`` linked to that checkout's ``daemon/``,
``config/``, ``ui/`` and ``packaging/assets/``; the first line says which code runs.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import time

import anyfill.daemon
from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.complete_cmd import CompleteArgs, _context, _run_batch
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.engine.engine import Engine
from tests.servers import LlamaCpp, Reply
from tests.servers.http import LoopbackServer


def _settings(url: str) -> Settings:
    config = BackendConfig(name="llamacpp", type="llamacpp", url=url)
    return Settings(backends=[config], routing=RoutingConfig(default=["llamacpp"]))


async def _measure(lines: int, delay_ms: int) -> None:
    reply = Reply(text="x = 1", delay_s=delay_ms / 1000)
    server = LlamaCpp(default=reply, model_path="/m/mystery.gguf", vocab=())
    srv = await LoopbackServer(server).start()
    try:
        settings = _settings(srv.url)
        docs = [(f"v{i} = ", "\n") for i in range(lines)]
        started = time.perf_counter()
        async with Engine(settings) as engine:
            for i, (prefix, suffix) in enumerate(docs):
                request = CompletionRequest(
                    _context(prefix, suffix, ""), id=f"one-{i}", backends=("llamacpp",)
                )
                await engine.complete(request)
        single = (time.perf_counter() - started) / lines
        single_requests = len(srv.requests)

        text = [json.dumps({"id": i, "prefix": p, "suffix": s}) for i, (p, s) in enumerate(docs)]
        out = io.StringIO()
        started = time.perf_counter()
        await _run_batch(settings, ("llamacpp",), text, CompleteArgs(jsonl="-"), out)
        batch = (time.perf_counter() - started) / lines
        batch_paths = [r.path for r in srv.requests[single_requests:]]
        assert len(out.getvalue().splitlines()) == lines
    finally:
        await srv.stop()
    print(
        f"{lines} lines, server {delay_ms} ms: single requests {single * 1e3:.2f} ms/line, --jsonl "
        f"{batch * 1e3:.2f} ms/line, ratio {batch / single:.2f}; batch sent "
        f"{batch_paths.count('/infill')} /infill, {batch_paths.count('/props')} /props, "
        f"{batch_paths.count('/tokenize')} /tokenize"
    )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(lines: int = 400, delay_ms: int = 0, runs: int = 1) -> None:
    print(f"anyfill.daemon from {os.path.dirname(anyfill.daemon.__file__)}; load {_load()}")
    for _ in range(runs):
        asyncio.run(_measure(lines, delay_ms))
    print(f"{runs} runs; load {_load()}")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:4]))

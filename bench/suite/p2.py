"""P2: what one completion costs the client (scheduler + HTTP), against a loopback stub.

Every client streams the same FIM-sized ``/v1/completions`` request from a stub in another
process (so only the client's CPU is counted) at concurrency 1 and 32, in interleaved
repetitions. Figures are ratios to raw aiohttp measured in the same repetition; a second
raw-aiohttp run (A/A) shows the noise.

Clients: anyfill (Scheduler + the openai-completions backend, with the HTTP client
``make_client`` builds and with plain httpx), anyfill cut at two layers (the HTTP client
alone, then with the backend: where the cost goes), raw httpx, raw aiohttp, the openai SDK
and the LiteLLM Router with the same limits (the peers only when installed: ``pip install
'anyfill[bench]'``).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from anyfill.bench.harness import (
    MAX_TOKENS,
    MODEL,
    PREFIX,
    SUFFIX,
    Say,
    fim_request,
    machine,
    median,
    openai_body,
    quantile,
    quiet,
    sse_text,
    stub,
    stub_config,
)
from anyfill.daemon.heap import freeze_startup_objects

CONCURRENCY = 32
RPM = 1_000_000  # the limits every limited client gets: generous, so only their cost shows


class BenchClient:
    name = ""

    async def open(self, url: str) -> None:
        raise NotImplementedError

    async def one(self, worker: int) -> str:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class RawHttpx(BenchClient):
    name = "httpx (raw)"

    async def open(self, url: str) -> None:
        import httpx

        self.url = f"{url}/v1/completions"
        self.body = openai_body()
        self.client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64)
        )

    async def one(self, worker: int) -> str:
        parts = []
        async with self.client.stream("POST", self.url, json=self.body) as response:
            async for line in response.aiter_lines():
                parts.append(sse_text(line))
        return "".join(parts)

    async def close(self) -> None:
        await self.client.aclose()


class RawAiohttp(BenchClient):
    name = "aiohttp (raw)"

    def __init__(self, name: str = "aiohttp (raw)") -> None:
        self.name = name

    async def open(self, url: str) -> None:
        import aiohttp

        self.url = f"{url}/v1/completions"
        self.body = openai_body()
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))

    async def one(self, worker: int) -> str:
        parts = []
        async with self.session.post(self.url, json=self.body) as response:
            async for raw in response.content:
                parts.append(sse_text(raw.decode().rstrip("\n")))
        return "".join(parts)

    async def close(self) -> None:
        await self.session.close()


class OpenAISdk(BenchClient):
    name = "openai SDK"

    async def open(self, url: str) -> None:
        openai = importlib.import_module("openai")
        self.client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-bench", max_retries=0)
        body = openai_body()
        self.kwargs = {k: body[k] for k in ("model", "prompt", "max_tokens", "temperature", "stop")}

    async def one(self, worker: int) -> str:
        stream = await self.client.completions.create(stream=True, **self.kwargs)
        parts: list[str] = []
        async for chunk in stream:
            parts.extend(choice.text or "" for choice in chunk.choices)
        return "".join(parts)

    async def close(self) -> None:
        await self.client.close()


class LiteLLMRouter(BenchClient):
    name = "LiteLLM Router"

    async def open(self, url: str) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        litellm = importlib.import_module("litellm")
        litellm.telemetry = False  # type: ignore[attr-defined]
        self.router = litellm.Router(
            model_list=[
                {
                    "model_name": "stub",
                    "litellm_params": {
                        "model": f"text-completion-openai/{MODEL}",
                        "api_base": f"{url}/v1",
                        "api_key": "sk-bench",
                        "rpm": RPM,
                        "max_parallel_requests": CONCURRENCY,
                    },
                }
            ],
            num_retries=0,
        )
        body = openai_body()
        self.kwargs = {k: body[k] for k in ("prompt", "max_tokens", "temperature", "stop")}

    async def one(self, worker: int) -> str:
        stream = await self.router.atext_completion(model="stub", stream=True, **self.kwargs)
        parts: list[str] = []
        async for chunk in stream:
            parts.extend(choice.text or "" for choice in chunk.choices)
        return "".join(parts)


class Anyfill(BenchClient):
    """The scheduler with the real openai-completions backend."""

    def __init__(self, transport: str = "default") -> None:
        self.transport = transport
        self.name = "anyfill" if transport == "default" else f"anyfill ({transport})"
        self.count = 0

    async def open(self, url: str) -> None:
        import httpx

        from anyfill.config.model import Limits, RoutingConfig
        from anyfill.daemon.backends.base import FimPrompt
        from anyfill.daemon.backends.http import make_client
        from anyfill.daemon.backends.registry import create_backend
        from anyfill.daemon.scheduler import Scheduler

        config = stub_config(url, Limits(requests_per_minute=RPM, max_concurrent=CONCURRENCY))
        self.client: httpx.AsyncClient
        if self.transport == "default":
            self.client = make_client(config)
        elif self.transport == "httpx":
            self.client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=64)
            )
        elif self.transport == "httpx-aiohttp":
            from httpx_aiohttp import AiohttpTransport

            self.client = httpx.AsyncClient(
                transport=AiohttpTransport(
                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=64)
                )
            )
        else:
            raise ValueError(self.transport)
        backend = create_backend(config, self.client, "sk-bench")
        self.scheduler = Scheduler([backend], RoutingConfig(default=["stub"]))
        self.prompt = FimPrompt(prefix=PREFIX, suffix=SUFFIX, max_tokens=MAX_TOKENS)

    async def one(self, worker: int) -> str:
        from anyfill.daemon.completion import Text

        self.count += 1
        request = fim_request(f"b{self.count}", app=f"bench{worker}")
        parts = []
        async for event in self.scheduler.dispatch(request, self.prompt):
            if isinstance(event, Text):
                parts.append(event.chunk)
        return "".join(parts)

    async def close(self) -> None:
        await self.scheduler.aclose()
        await self.client.aclose()


class AnyfillLayer(BenchClient):
    """anyfill's stack cut at a layer, to show where its cost goes: ``http`` is the HTTP
    client ``make_client`` builds with SSE parsing (httpx objects on the aiohttp
    transport); ``backend`` adds the openai-completions backend; the scheduler on top is
    the ``anyfill`` row."""

    def __init__(self, layer: str) -> None:
        self.layer = layer
        self.name = f"  layer: {layer}"

    async def open(self, url: str) -> None:
        from anyfill.config.model import Limits
        from anyfill.daemon.backends.base import FimPrompt
        from anyfill.daemon.backends.http import make_client
        from anyfill.daemon.backends.registry import create_backend

        config = stub_config(url, Limits(requests_per_minute=RPM, max_concurrent=CONCURRENCY))
        self.client = make_client(config)
        self.backend = create_backend(config, self.client, "sk-bench")
        self.prompt = FimPrompt(prefix=PREFIX, suffix=SUFFIX, max_tokens=MAX_TOKENS)
        self.url = f"{url}/v1/completions"
        self.body = openai_body()

    async def one(self, worker: int) -> str:
        from anyfill.daemon.backends.wire import iter_sse_batches

        if self.layer == "backend":
            return "".join([chunk async for chunk in self.backend.stream(self.prompt)])
        request = self.client.build_request("POST", self.url, json=self.body)
        response = await self.client.send(request, stream=True)
        parts: list[str] = []
        try:
            async for events in iter_sse_batches(response, "stub"):
                parts.extend(sse_text(f"data: {event.data}") for event in events)
        finally:
            await response.aclose()
        return "".join(parts)

    async def close(self) -> None:
        await self.client.aclose()


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)
    cpu_per_request: float = 0.0
    throughput: float = 0.0


async def measure(client: BenchClient, requests: int, concurrency: int) -> Sample:
    counter = iter(range(requests))
    latencies: list[float] = []

    async def worker(index: int) -> None:
        for _ in counter:
            started = time.perf_counter()
            text = await client.one(index)
            latencies.append(time.perf_counter() - started)
            if not text:
                raise RuntimeError(f"{client.name} returned no text")

    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    return Sample(latencies, cpu / requests, requests / wall)


def available_clients(peers: bool, say: Say) -> list[Callable[[], BenchClient]]:
    makers: list[Callable[[], BenchClient]] = [
        RawAiohttp,
        lambda: RawAiohttp("aiohttp (raw, A/A)"),
        RawHttpx,
        lambda: Anyfill("default"),
        lambda: AnyfillLayer("http"),
        lambda: AnyfillLayer("backend"),
        lambda: Anyfill("httpx"),
    ]
    if importlib.util.find_spec("httpx_aiohttp") is not None:
        makers.append(lambda: Anyfill("httpx-aiohttp"))
    else:
        say("  (anyfill over httpx-aiohttp: not installed; pip install 'anyfill[bench]')")
    if peers:
        for module, maker in (("openai", OpenAISdk), ("litellm", LiteLLMRouter)):
            if importlib.util.find_spec(module) is None:
                say(f"  ({maker.name}: '{module}' is not installed; pip install 'anyfill[bench]')")
                continue
            makers.append(maker)
    return makers


async def run_async(
    reps: int, c1_requests: int, c32_requests: int, peers: bool, say: Say
) -> dict[str, dict[str, list[float]]]:
    """Every client opened once, then ``reps`` rounds in a shuffled order each: short
    interleaved rounds let slow drifts of a shared machine hit every client alike."""
    results: dict[str, dict[str, list[float]]] = {}
    with stub() as server:
        clients: list[BenchClient] = []
        for make in available_clients(peers, say):
            client = make()
            try:
                await client.open(server.url)
                await measure(client, 30, 4)  # warm: connections, imports, caches
            except Exception as exc:  # noqa: BLE001 - one client failing must not hide the rest
                say(f"  {client.name}: cannot run: {type(exc).__name__}: {exc}")
                await client.close()
                continue
            clients.append(client)
        freeze_startup_objects()  # as the daemon does once it has started; alike for all
        for client in clients:  # rows in a fixed order, whatever order the rounds take
            results[client.name] = {}
        try:
            for rep in range(reps):
                order = list(clients)
                random.Random(rep).shuffle(order)
                for client in order:
                    c1 = await measure(client, c1_requests, 1)
                    c32 = await measure(client, c32_requests, CONCURRENCY)
                    row = results.setdefault(client.name, {})
                    row.setdefault("c1_p50_ms", []).append(quantile(c1.latencies, 0.5) * 1e3)
                    row.setdefault("c1_cpu_ms", []).append(c1.cpu_per_request * 1e3)
                    row.setdefault("c32_rps", []).append(c32.throughput)
                    row.setdefault("c32_cpu_ms", []).append(c32.cpu_per_request * 1e3)
                say(f"  round {rep + 1}/{reps} done")
        finally:
            for client in clients:
                await client.close()
    return results


def report(results: dict[str, dict[str, list[float]]], baseline: str = "aiohttp (raw)") -> str:
    """Medians of the figures, and medians of the per-round ratios to ``baseline``."""
    base = results.get(baseline)
    lines = [
        "P2: client cost per streamed FIM request (loopback stub in another process)",
        f"    machine: {machine()}",
        "    medians over rounds; (x) = median of per-round ratios to raw aiohttp",
        f"    {'client':<24} {'c=1 p50':>16} {'c=1 CPU/req':>18} "
        f"{'c=32 req/s':>18} {'c=32 CPU/req':>18}",
    ]
    for name, row in results.items():
        cells = []
        for key, unit in (
            ("c1_p50_ms", "ms"),
            ("c1_cpu_ms", "ms"),
            ("c32_rps", ""),
            ("c32_cpu_ms", "ms"),
        ):
            value = median(row[key])
            ratio = (
                median([mine / theirs for mine, theirs in zip(row[key], base[key], strict=True)])
                if base and key in base
                else float("nan")
            )
            cells.append(f"{value:8.2f}{unit:<2} ({ratio:4.2f}x)")
        lines.append(f"    {name:<24} " + " ".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)


def run(
    reps: int = 10,
    c1_requests: int = 60,
    c32_requests: int = 192,
    peers: bool = True,
    say: Say = quiet,
) -> str:
    results = asyncio.run(run_async(reps, c1_requests, c32_requests, peers, say))
    return report(results)

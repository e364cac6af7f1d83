"""MQTT: the worker-pool path against the direct one, and the pool under load.

Everything runs on loopback: a mosquitto started for the run (a config written here, a
free port), the lean stub server of the other benchmarks, and ``anyfill worker``
processes. Three parts, each with its baseline in the same run:

- **latency**: one request at a time through ``Engine.complete``, the chain being either
  the stub itself (direct) or a backend of type ``mqtt`` whose worker asks the stub;
  blocks alternate so drift hits both alike. The added latency is the difference.
- **throughput**: one worker pinned to one core answers as many pool requests as it can
  (32 in flight, published by a lean client), against the same scheduler dispatching to
  the stub directly (what a worker does per request, minus MQTT), pinned to one core.
- **load**: 2 workers (a pool-wide limit of ``LIMIT`` requests per ``WINDOW_S`` window),
  20 desktop engines whose chain is the pool then a direct fallback stub, 2,000 requests
  with random cancels, one worker killed (SIGKILL) half way. Every request must end
  exactly once as answered, cancelled or fallen back; nothing lost, no reply used twice;
  the pool stub never sees more than ``LIMIT`` requests in any window.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anyfill.bench.harness import (
    MAX_TOKENS,
    MODEL,
    PREFIX,
    SUFFIX,
    Say,
    fim_request,
    machine,
    quantile,
    quiet,
    stub,
)

POOL = "bench"
LIMIT = 60
WINDOW_S = 1.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def mosquitto(workdir: Path) -> Iterator[str]:
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(binary).exists():
        raise RuntimeError("the MQTT benchmark needs mosquitto (Debian: apt install mosquitto)")
    port = _free_port()
    config = workdir / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        f"set_tcp_nodelay true\nlog_type error\nuser {getpass.getuser()}\n"
    )
    process = subprocess.Popen([binary, "-c", str(config)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("mosquitto did not start")
            time.sleep(0.02)
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(5)


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)


def start_worker(
    workdir: Path,
    broker: str,
    backend: str,
    name: str,
    *,
    limit: int = 0,
    cpu: int | None = None,
    sends: Path | None = None,
) -> WorkerProcess:
    config = workdir / f"{name}.toml"
    config.write_text(
        f'[[backends]]\nname = "stub"\ntype = "openai-completions"\nurl = "{backend}"\n'
        f'model = "{MODEL}"\nmax_tokens = {MAX_TOKENS}\n'
        f"[backends.limits]\nrequests_per_minute = {limit}\nmax_concurrent = 64\n"
        f'[routing]\ndefault = ["stub"]\n[mqtt]\nurl = "{broker}"\n'
        '[logging]\nfile = false\nlevel = "WARNING"\n'
    )
    log = workdir / f"{name}.log"
    args = [sys.executable, "-m", "anyfill.daemon.cli", "--config", str(config), "worker"]
    args += ["--pool", POOL, "--id", name, "--limit-window-s", str(WINDOW_S)]
    if sends is not None:
        args += ["--sends-log", str(sends)]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    if cpu is not None:
        os.sched_setaffinity(process.pid, {cpu})
    return WorkerProcess(process, log)


def desktop_settings(broker: str, direct: str | None, deadline_s: float = 5.0) -> Any:
    from anyfill.config.model import Settings

    backends: list[dict[str, Any]] = [
        {
            "name": "pool",
            "type": "mqtt",
            "url": broker,
            "pool": POOL,
            "timeouts": {"first_token_s": deadline_s},
            "limits": {"max_concurrent": 256},
        }
    ]
    if direct is not None:
        backends.append(_direct(direct))
    return Settings.model_validate(
        {"backends": backends, "routing": {"default": [b["name"] for b in backends]}}
    )


def _direct(url: str) -> dict[str, Any]:
    return {
        "name": "direct",
        "type": "openai-completions",
        "url": url,
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "limits": {"max_concurrent": 256},
    }


async def _wait_for_workers(broker: str, count: int, within: float = 30) -> None:
    from anyfill.config.model import BackendConfig
    from anyfill.daemon.mqtt.pool_backend import MqttPoolBackend

    config = BackendConfig(name="probe", type="mqtt", url=broker, pool=POOL)
    probe = MqttPoolBackend(config, None, None)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + within
        while True:
            with contextlib.suppress(Exception):
                await probe.health()
            if len(probe.link.workers) >= count:
                await asyncio.sleep(WINDOW_S + 0.5)  # a second worker's join delay
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(probe.link.workers)} of {count} workers came up")
            await asyncio.sleep(0.1)
    finally:
        await probe.aclose()


# -- latency -------------------------------------------------------------------------------


async def latency(broker: str, backend: str, per_side: int, say: Say) -> dict[str, list[float]]:
    from anyfill.daemon.engine.engine import Engine

    times: dict[str, list[float]] = {"direct": [], "mqtt": []}
    direct_settings = desktop_settings(broker, backend)
    direct_settings.routing.default = ["direct"]
    async with Engine(desktop_settings(broker, None)) as pool, Engine(direct_settings) as direct:
        engines = {"direct": direct, "mqtt": pool}
        for engine in engines.values():  # warm up connections and template detection
            for index in range(20):
                await engine.complete(fim_request(f"w{index}-{id(engine)}", "bench"))
        block = 25
        for start in range(0, per_side, block):
            for name, engine in engines.items():
                for index in range(start, min(per_side, start + block)):
                    began = time.perf_counter()
                    await engine.complete(fim_request(f"{name}-{index}", "bench"))
                    times[name].append((time.perf_counter() - began) * 1000)
    say(f"  latency: {per_side} sequential requests per path")
    return times


# -- throughput ------------------------------------------------------------------------------


async def pool_throughput(broker: str, requests: int, in_flight: int = 32) -> float:
    """A lean client keeps ``in_flight`` pool requests outstanding; finals per second."""
    import json

    from anyfill.daemon.mqtt.connection import BrokerClient, BrokerSpec, publish_properties
    from anyfill.daemon.mqtt.protocol import dumps
    from anyfill.daemon.mqtt.topics import PoolTopics

    topics = PoolTopics("anyfill", POOL)
    client_id = f"bench-{uuid.uuid4().hex[:8]}"
    reply = topics.reply(client_id)
    body = {"prefix": PREFIX, "suffix": SUFFIX, "max_tokens": MAX_TOKENS, "deadline_ms": 30000}
    slots = asyncio.Semaphore(in_flight)
    done = 0
    finished = asyncio.Event()
    port = int(broker.rsplit(":", 1)[1])
    async with BrokerClient(BrokerSpec("127.0.0.1", port, client_id=client_id)) as client:
        await client.subscribe(reply, qos=1)

        async def read() -> None:
            nonlocal done
            async for message in client.messages:
                payload = message.payload if isinstance(message.payload, bytes) else b""
                if json.loads(payload).get("type") == "final":
                    done += 1
                    slots.release()
                    if done == requests:
                        finished.set()
                        return

        reader = asyncio.create_task(read())
        started = time.perf_counter()
        for index in range(requests):
            await slots.acquire()
            properties = publish_properties(
                response_topic=reply, correlation=str(index).encode(), expiry_s=30
            )
            request_id = f"{client_id}-{index}"  # unique: a worker ignores an id it has seen
            client.send(topics.request, dumps({"id": request_id, **body}), properties=properties)
        await asyncio.wait_for(finished.wait(), 120)
        took = time.perf_counter() - started
        reader.cancel()
    return requests / took


async def direct_throughput(backend: str, requests: int, in_flight: int = 32) -> float:
    from anyfill.daemon.engine.engine import Engine

    settings = desktop_settings("mqtt://127.0.0.1:1", backend)
    settings.routing.default = ["direct"]
    async with Engine(settings) as engine:
        await engine.complete(fim_request("warm", "bench"))
        slots = asyncio.Semaphore(in_flight)

        async def one(index: int) -> None:
            # what a worker does per request: the scheduler's dispatch, no cleaning
            request = fim_request(f"d{index}", f"t{index}")
            async with slots:
                prompt = engine.prompt_for(request)
                async for _event in engine.dispatcher.dispatch(request, prompt):
                    pass

        started = time.perf_counter()
        await asyncio.gather(*(one(index) for index in range(requests)))
        return requests / (time.perf_counter() - started)


# -- load --------------------------------------------------------------------------------------


@dataclass
class Tally:
    answered: int = 0
    fallen_back: int = 0
    cancelled: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    late_replies: int = 0
    ends: dict[str, int] = field(default_factory=dict)

    def end(self, request_id: str, kind: str) -> None:
        self.ends[request_id] = self.ends.get(request_id, 0) + 1
        setattr(self, kind, getattr(self, kind) + 1)


async def load(
    broker: str,
    direct: str,
    on_half: Any,
    *,
    clients: int = 20,
    requests: int = 2000,
    cancel_share: float = 0.1,
) -> Tally:
    from anyfill.daemon.engine.engine import Engine
    from anyfill.daemon.errors import AnyfillError, RequestDropped

    tally = Tally()
    rng = random.Random(14)
    per_client = requests // clients
    issued = 0
    half = asyncio.Event()

    async def desktop(number: int) -> None:
        nonlocal issued
        async with Engine(desktop_settings(broker, direct, deadline_s=2.0)) as engine:
            for index in range(per_client):
                request = fim_request(f"c{number}-{index}", f"desk{number}")
                task = asyncio.create_task(engine.complete(request))
                issued += 1
                if issued == requests // 2:
                    half.set()
                if rng.random() < cancel_share:
                    await asyncio.sleep(rng.uniform(0, 0.03))
                    await engine.cancel(request.id)
                try:
                    done = await task
                except RequestDropped:
                    tally.end(request.id, "cancelled")
                except (AnyfillError, TimeoutError) as error:
                    tally.errors.append(f"{type(error).__name__}: {error}")
                    tally.end(request.id, "lost")
                else:
                    kind = "answered" if done.backend == "pool" else "fallen_back"
                    tally.end(request.id, kind)
            tally.late_replies += engine.backends["pool"].link.late_replies  # type: ignore[attr-defined]

    async def killer() -> None:
        await half.wait()
        on_half()

    kill = asyncio.create_task(killer())
    await asyncio.gather(*(desktop(number) for number in range(clients)))
    kill.cancel()
    return tally


def most_in_window(arrivals: list[float], window: float) -> int:
    ordered = sorted(arrivals)
    worst = 0
    start = 0
    for end, at in enumerate(ordered):
        while ordered[start] <= at - window:
            start += 1
        worst = max(worst, end - start + 1)
    return worst


# -- the report ----------------------------------------------------------------------------------


def run(*, quick: bool = False, say: Say = quiet) -> str:
    per_side = 100 if quick else 400
    tput = 500 if quick else 2000
    lines = ["MQTT worker pool vs the direct path (loopback broker, stub backend)"]
    lines.append(f"  machine: {machine()}")
    workdir = Path(tempfile.mkdtemp(prefix="anyfill-bench-mqtt-"))
    cores = sorted(os.sched_getaffinity(0))
    try:
        with mosquitto(workdir) as broker, stub() as backend, stub() as fallback:
            # latency, one worker
            worker = start_worker(workdir, broker, backend.url, "lat")
            asyncio.run(_wait_for_workers(broker, 1))
            times = asyncio.run(latency(broker, backend.url, per_side, say))
            worker.kill()
            d50, d99 = quantile(times["direct"], 0.5), quantile(times["direct"], 0.99)
            m50, m99 = quantile(times["mqtt"], 0.5), quantile(times["mqtt"], 0.99)
            lines.append(f"  latency, {per_side} requests each, Engine.complete, c=1:")
            lines.append(f"    direct        p50 {d50:6.2f} ms   p99 {d99:6.2f} ms")
            lines.append(f"    via the pool  p50 {m50:6.2f} ms   p99 {m99:6.2f} ms")
            lines.append(
                f"    added         p50 {m50 - d50:+6.2f} ms   p99 {m99 - d99:+6.2f} ms"
                "   (goal: p50 <= 2 ms, p99 <= 10 ms)"
            )
            # throughput, one worker on one core
            core = cores[-1]
            worker = start_worker(workdir, broker, backend.url, "tput", cpu=core)
            asyncio.run(_wait_for_workers(broker, 1))
            asyncio.run(pool_throughput(broker, 100))  # warm-up
            pool_rate = asyncio.run(pool_throughput(broker, tput))
            worker.kill()
            os.sched_setaffinity(0, {core})
            try:
                direct_rate = asyncio.run(direct_throughput(backend.url, tput))
            finally:
                os.sched_setaffinity(0, set(cores))
            lines.append(f"  throughput, {tput} requests, 32 in flight, one core (cpu {core}):")
            lines.append(f"    direct HTTP (scheduler -> stub)        {direct_rate:7.0f} req/s")
            lines.append(
                f"    one worker (broker -> worker -> stub) {pool_rate:7.0f} req/s "
                f"({pool_rate / direct_rate:.2f}x direct)"
            )
            # load
            backend.reset()
            sends = workdir / "sends.log"
            workers = [
                start_worker(workdir, broker, backend.url, f"w{n}", limit=LIMIT, sends=sends)
                for n in (1, 2)
            ]
            asyncio.run(_wait_for_workers(broker, 2))
            started = time.monotonic()
            tally = asyncio.run(load(broker, fallback.url, workers[0].kill))
            took = time.monotonic() - started
            for running in workers:
                running.kill()
            arrivals = backend.stats()["arrivals"]
            worst = most_in_window(arrivals, WINDOW_S)
            sent = [float(line) for line in sends.read_text().split()]
            # A send time is recorded a few microseconds after the limiter's own mark (when
            # the attempt's event is published): shrink the window by 1 ms so that two
            # sends exactly one window apart are not counted together.
            worst_sent = most_in_window(sent, WINDOW_S - 0.001)
            twice = sum(1 for count in tally.ends.values() if count > 1)
            total = tally.answered + tally.fallen_back + tally.cancelled + tally.lost
            lines.append(
                f"  load: 2 workers, 20 desktops, 2000 requests, ~10% cancelled, worker w1 "
                f"killed half way ({took:.1f} s)"
            )
            lines.append(
                f"    answered {tally.answered}, cancelled {tally.cancelled}, fallen back "
                f"{tally.fallen_back}, lost {tally.lost}, ended twice {twice} (total {total})"
            )
            lines.append(
                f"    late replies dropped by the desktops (never used): {tally.late_replies}"
            )
            lines.append(
                f"    pool limit {LIMIT} per {WINDOW_S:g} s window, most in any window: "
                f"{worst_sent} as the workers' limiters sent them ({len(sent)} sends, "
                f"window less 1 ms); {worst} as the server read them ({len(arrivals)} requests)"
            )
            if tally.errors:
                lines.append(f"    first errors: {tally.errors[:3]}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return "\n".join(lines)


__all__ = ["run"]

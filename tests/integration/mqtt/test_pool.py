"""Worker pools on a real broker: ``anyfill worker`` processes, and a desktop engine whose
chain starts with a backend of type ``mqtt``.

Each test starts its own mosquitto, loopback llama.cpp responders and worker processes.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import RequestDropped
from anyfill.daemon.scheduler.events import AttemptFinished
from tests.e2e.harness import wait_until
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import Broker, Probe, Received
from tests.servers.script import Reply

pytestmark = pytest.mark.broker

POOL = "team"


class WorkerProcess:
    def __init__(
        self,
        workdir: Path,
        broker: Broker,
        backend_url: str,
        name: str,
        *args: str,
        extra: str = "",
        extra_mqtt: str = "",
    ) -> None:
        self.log_path = workdir / f"{name}.log"
        config = workdir / f"{name}.toml"
        config.write_text(
            f"""
[[backends]]
name = "gpu"
type = "llamacpp"
url = "{backend_url}"
{extra}
[routing]
default = ["gpu"]
[mqtt]
url = "{broker.url}"
{extra_mqtt}
[logging]
file = false
"""
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "anyfill.daemon.cli",
                    "--debug",
                    "--config",
                    str(config),
                    "worker",
                    "--pool",
                    POOL,
                    "--id",
                    name,
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(lambda: self.alive() and "serves pool" in self.log(), 20, f"worker {name}")

    def alive(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"worker exited {self.process.returncode}: {self.log()}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            if sig == signal.SIGSTOP:
                return
        if sig != signal.SIGSTOP:
            self.process.wait(10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextmanager
def workers(
    tmp_path: Path,
    broker: Broker,
    url: str,
    count: int = 1,
    *args: str,
    extra: str = "",
    extra_mqtt: str = "",
) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        for index in range(count):
            name = f"w{index + 1}"
            started.append(
                WorkerProcess(
                    tmp_path, broker, url, name, *args, extra=extra, extra_mqtt=extra_mqtt
                )
            )
        yield started
    finally:
        for worker in started:
            worker.kill()


def desktop(broker: Broker, direct_url: str | None, deadline_s: float = 10.0) -> Settings:
    backends: list[dict[str, Any]] = [
        {
            "name": "pool",
            "type": "mqtt",
            "url": broker.url,
            "pool": POOL,
            "timeouts": {"first_token_s": deadline_s, "total_s": 30.0},
        }
    ]
    if direct_url is not None:
        backends.append({"name": "direct", "type": "llamacpp", "url": direct_url})
    return Settings.model_validate(
        {"backends": backends, "routing": {"default": [b["name"] for b in backends]}}
    )


def request(prefix: str = "def add(a, b):\n    ") -> CompletionRequest:
    return CompletionRequest(Context(prefix, "\n", app="editor", window_id=1))


@pytest.fixture
def direct() -> Iterator[tuple[LlamaCpp, LoopbackServer]]:
    responder = LlamaCpp(default=Reply(text="return b + a"))
    with LoopbackServer.in_thread(responder) as server:
        yield responder, server


async def test_a_desktop_gets_its_answer_from_a_pool_worker(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    with workers(tmp_path, broker, gpu[1].url):
        async with Engine(desktop(broker, None)) as engine:
            done = await engine.complete(request())
    assert done.middle == "return a + b"
    assert done.backend == "pool"
    assert done.plan.mode in ("native", "template")
    assert len(completions(gpu[1])) == 1  # the worker asked its own server


async def test_no_worker_online_falls_back_at_once(
    broker: Broker, direct: tuple[LlamaCpp, LoopbackServer]
) -> None:
    bus = EventBus()
    attempts = bus.subscribe(AttemptFinished)
    async with Engine(desktop(broker, direct[1].url, deadline_s=10), bus=bus) as engine:
        started = time.monotonic()
        done = await engine.complete(request())
        took = time.monotonic() - started
    first: AttemptFinished = attempts.get_nowait()
    assert done.backend == "direct"
    assert first.backend == "pool"
    assert first.outcome == "unavailable"
    assert "no worker" in first.reason
    assert took < 2.0, f"waited {took:.1f} s instead of falling back at once (deadline 10 s)"


async def test_a_worker_killed_mid_answer_costs_nothing_more_than_a_fallback(
    tmp_path: Path,
    broker: Broker,
    gpu: tuple[LlamaCpp, LoopbackServer],
    direct: tuple[LlamaCpp, LoopbackServer],
) -> None:
    gpu[0].push(Reply(chunks=["return"] + [" a"] * 40, chunk_delay_s=0.1))
    with workers(tmp_path, broker, gpu[1].url) as (worker,):
        async with Engine(desktop(broker, direct[1].url, deadline_s=3)) as engine:
            seen: list[str] = []
            task = asyncio.create_task(engine.complete(request(), seen.append))
            await asyncio.to_thread(wait_until, lambda: seen, 10, "text from the worker")
            killed = time.monotonic()
            worker.kill()
            done = await task
            after_kill = time.monotonic() - killed
    assert done.backend == "direct"
    assert done.middle == "return b + a"  # the fallback's answer, not a mix with the worker's
    assert after_kill < 3.0, f"{after_kill:.1f} s after the kill (deadline 3 s)"


async def test_a_frozen_worker_costs_at_most_the_deadline_and_its_late_answer_is_ignored(
    tmp_path: Path,
    broker: Broker,
    gpu: tuple[LlamaCpp, LoopbackServer],
    direct: tuple[LlamaCpp, LoopbackServer],
) -> None:
    with workers(tmp_path, broker, gpu[1].url) as (worker,):
        worker.stop(signal.SIGSTOP)  # alive to the broker (no Will), deaf to requests
        try:
            async with Engine(desktop(broker, direct[1].url, deadline_s=1.5)) as engine:
                started = time.monotonic()
                done = await engine.complete(request())
                took = time.monotonic() - started
                worker.process.send_signal(signal.SIGCONT)
                link = engine.backends["pool"].link  # type: ignore[attr-defined]

                def handled() -> bool:  # answered too late (and dropped here), or cancelled
                    return bool(link.late_replies) or "dropped: cancelled" in worker.log()

                # The worker wakes and finds the request and the desktop's cancel.
                await asyncio.to_thread(wait_until, handled, 10, "the worker to catch up")
                assert not link.pending
        finally:
            worker.process.send_signal(signal.SIGCONT)
    assert done.backend == "direct"
    assert done.middle == "return b + a"
    assert 1.4 <= took < 3.0, f"fell back after {took:.2f} s with a 1.5 s deadline"


async def test_a_cancel_reaches_the_worker_and_closes_its_upstream_stream(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    gpu[0].push(Reply(chunks=["x"] * 60, chunk_delay_s=0.1))
    with workers(tmp_path, broker, gpu[1].url):
        async with Engine(desktop(broker, None)) as engine:
            seen: list[str] = []
            req = request()
            task = asyncio.create_task(engine.complete(req, seen.append))
            await asyncio.to_thread(wait_until, lambda: seen, 10, "text from the worker")
            assert await engine.cancel(req.id)
            with pytest.raises(RequestDropped):
                await task
            gone = await asyncio.to_thread(gpu[1].wait_disconnect_sync, 1, 5.0)
    assert gone.chunks_sent < 60


def completions(server: LoopbackServer) -> list[Any]:
    """The requests that asked for text (not /props, /tokenize...)."""
    return [r for r in server.requests if r.path in ("/infill", "/completion", "/v1/completions")]


def _pool_request(request_id: str, **fields: Any) -> bytes:
    body = {"id": request_id, "prefix": "a = ", "suffix": "\n", **fields}
    return json.dumps(body).encode()


def test_a_request_still_queued_at_its_deadline_is_dropped_unanswered(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    gpu[0].push(Reply(text="slow", delay_s=0.8))
    one_at_a_time = "[backends.limits]\nmax_concurrent = 1"
    with (
        workers(tmp_path, broker, gpu[1].url, extra=one_at_a_time),
        Probe(broker.port) as probe,
    ):
        probe.subscribe("probe/replies")
        topic = f"anyfill/fim/{POOL}/request"
        probe.publish(topic, _pool_request("busy"), response_topic="probe/replies", expiry=5)
        probe.publish(
            topic,
            _pool_request("late", deadline_ms=300),
            response_topic="probe/replies",
            expiry=1,
        )
        replies = probe.until(lambda m: m.json().get("type") == "final", 10)
        time.sleep(1.0)
        assert probe.inbox.empty()
    assert {r.json()["id"] for r in replies} == {"busy"}
    assert len(completions(gpu[1])) == 1  # the expired one never reached the server


def test_a_request_delivered_twice_is_answered_once(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    with workers(tmp_path, broker, gpu[1].url), Probe(broker.port) as probe:
        probe.subscribe("probe/replies")
        for _ in range(2):
            probe.publish(
                f"anyfill/fim/{POOL}/request",
                _pool_request("same"),
                response_topic="probe/replies",
                correlation=b"same",
            )
        probe.until(lambda m: m.json().get("type") == "final", 10)
        time.sleep(0.5)
        rest: list[Received] = []
        while not probe.inbox.empty():
            rest.append(probe.next())
    assert not [r for r in rest if r.json().get("type") == "final"]
    assert len(completions(gpu[1])) == 1


def test_prompts_that_arrive_together_travel_in_one_http_request(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    gpu[0].push(Reply(batch=["one", "two", "three"]))
    with (
        workers(tmp_path, broker, gpu[1].url, 1, "--batch-window-ms", "50"),
        Probe(broker.port) as probe,
    ):
        probe.subscribe("probe/replies")
        for name in ("b1", "b2", "b3"):
            probe.publish(
                f"anyfill/fim/{POOL}/request",
                _pool_request(name),
                response_topic="probe/replies",
                correlation=name.encode(),
            )
        finals: dict[str, Any] = {}
        while len(finals) < 3:
            message = probe.next(10)
            if message.json().get("type") == "final":
                finals[message.json()["id"]] = message.json()
    posts = [r for r in gpu[1].requests if r.path == "/v1/completions"]
    assert len(posts) == 1
    assert len(posts[0].json()["prompt"]) == 3
    assert all(final["ok"] for final in finals.values())


def test_workers_announce_themselves_and_their_will_clears_it(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    with workers(tmp_path, broker, gpu[1].url, 2) as (first, _second), Probe(broker.port) as probe:
        probe.subscribe(f"anyfill/fim/{POOL}/workers/+")
        present = {probe.next().topic.rsplit("/", 1)[-1] for _ in range(2)}
        first.kill()
        gone = probe.next(5)
    assert present == {"w1", "w2"}
    assert gone.topic.endswith("/w1")
    assert gone.payload == b""

"""One message never takes a service down (issue 24): hostile messages from a plain paho
client on a real mosquitto against the node bridge, a desktop's pool link and a worker.

Each test sends its bad messages, then checks that the same component still answers a
good request, on the same connection (no reconnect loop).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import AnyfillError
from anyfill.daemon.mqtt.connection import spec_from_config
from anyfill.daemon.mqtt.messages import Final, read_reply
from anyfill.daemon.mqtt.node import NodeBridge
from tests.integration.mqtt.test_pool import POOL, desktop, request, workers
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import Broker, Probe, Received
from tests.servers.script import Reply

pytestmark = pytest.mark.broker

NODE = "desk"
DEEP = b'{"id": "deep", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
"""Nesting far past any parser's recursion limit (json.loads raises RecursionError)."""


def is_final(message: Received) -> bool:
    return bool(message.json().get("type") == "final")


# -- the node ----------------------------------------------------------------------------


@asynccontextmanager
async def node(broker: Broker, server: LoopbackServer) -> AsyncIterator[NodeBridge]:
    settings = Settings.model_validate(
        {
            "backends": [{"name": "local", "type": "llamacpp", "url": server.url}],
            "routing": {"default": ["local"]},
            "mqtt": {"enabled": True, "url": broker.url, "node": NODE},
        }
    )
    async with Engine(settings) as engine:
        bridge = NodeBridge(engine, settings, spec_from_config(settings.mqtt, environ={}))
        task = asyncio.create_task(bridge.run())
        try:
            await asyncio.wait_for(bridge.connected.wait(), 10)
            yield bridge
            assert not task.done(), f"the bridge ended: {task}"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def ask(probe: Probe, body: dict[str, Any], within: float = 10) -> list[Received]:
    reply_topic = f"client/{uuid.uuid4().hex}/reply"
    probe.subscribe(reply_topic)
    probe.publish(
        f"anyfill/{NODE}/request", json.dumps(body), response_topic=reply_topic, correlation=b"c"
    )
    seen = probe.until(lambda m: m.topic == reply_topic and is_final(m), within)
    return [m for m in seen if m.topic == reply_topic]


def connections(caplog: pytest.LogCaptureFixture) -> int:
    return sum("on the broker" in r.getMessage() for r in caplog.records)


async def test_a_deep_nested_cancel_or_request_costs_the_node_nothing(
    broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "anyfill")
    async with node(broker, gpu[1]):
        with Probe(broker.port) as probe:
            await asyncio.to_thread(probe.publish, f"anyfill/{NODE}/cancel", DEEP)
            probe.subscribe("deep/reply")
            await asyncio.to_thread(
                probe.publish, f"anyfill/{NODE}/request", DEEP, response_topic="deep/reply"
            )
            refused = (await asyncio.to_thread(probe.until, is_final, 10))[-1].json()
            after = await asyncio.to_thread(ask, probe, {"id": "after", "prefix": "x = "})
    assert refused["ok"] is False
    assert refused["error"]["kind"] == "bad_request"
    assert "recursion limit" in refused["error"]["message"]
    assert after[-1].json()["ok"] is True
    assert after[-1].json()["middle"] == "return a + b"
    assert connections(caplog) == 1
    assert any("a cancel was ignored" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "topic",
    ["reply/with\u0000nul", "reply/#", "reply/+/x", "reply/\u001b[2J", "$SYS/reply"],
    ids=["nul", "hash", "plus", "escape", "dollar"],
)
async def test_a_reply_topic_no_one_can_publish_to_gets_an_error_on_the_nodes_own(
    broker: Broker,
    gpu: tuple[LlamaCpp, LoopbackServer],
    caplog: pytest.LogCaptureFixture,
    topic: str,
) -> None:
    caplog.set_level(logging.INFO, "anyfill")
    async with node(broker, gpu[1]):
        with Probe(broker.port, v5=False) as old_client:  # 3.1.1: the topic is in the payload
            old_client.subscribe(f"anyfill/{NODE}/response")
            body = json.dumps({"id": "bad-topic", "prefix": "a", "response_topic": topic})
            await asyncio.to_thread(old_client.publish, f"anyfill/{NODE}/request", body)
            refused = (await asyncio.to_thread(old_client.until, is_final, 10))[-1]
        with Probe(broker.port) as probe:
            answered = []
            for number in range(3):
                replies = await asyncio.to_thread(ask, probe, {"prefix": f"n{number} = "})
                answered.append(replies[-1].json()["ok"])
    assert refused.topic == f"anyfill/{NODE}/response"
    assert refused.json()["id"] == "bad-topic"
    assert refused.json()["error"]["kind"] == "bad_request"
    assert "reply topic" in refused.json()["error"]["message"]
    assert answered == [True, True, True]
    assert connections(caplog) == 1, "the broker dropped the node's connection"
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_every_node_reply_reads_as_a_typed_message(
    broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    gpu[0].push(Reply(chunks=["return", " a", " + b"], chunk_delay_s=0.02))
    async with node(broker, gpu[1]):
        with Probe(broker.port) as probe:
            replies = await asyncio.to_thread(ask, probe, {"id": "typed", "prefix": "a"})
    typed = [read_reply(r.payload) for r in replies]
    assert [m.type for m in typed] == ["chunk", "chunk", "chunk", "final"]
    assert [getattr(m, "text", None) for m in typed[:3]] == ["return", " a", " + b"]
    final = typed[-1]
    assert isinstance(final, Final)
    assert final.ok
    assert final.middle == "return a + b"
    assert final.usage is not None


# -- a desktop's pool link -----------------------------------------------------------------


HOSTILE_REPLIES = {
    # (Correlation Data, payload) sent to the desktop's reply topic
    "non-utf8-correlation": (b"\xff\xfe\xfd", b'{"id": "x", "type": "chunk", "text": "hi"}'),
    "deep-reply": (None, DEEP),
    "not-json": (b"abc", b"\x00\x01"),
    "huge-number": (b"abc", b'{"type": "final", "ok": false, "ms": 1' + b"0" * 5000 + b"}"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_REPLIES))
async def test_a_bad_reply_or_presence_never_ends_a_desktops_pool_link(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer], case: str
) -> None:
    correlation, payload = HOSTILE_REPLIES[case]
    with workers(tmp_path, broker, gpu[1].url), Probe(broker.port) as hostile:
        async with Engine(desktop(broker, None, deadline_s=5)) as engine:
            first = await engine.complete(request())
            link = engine.backends["pool"].link  # type: ignore[attr-defined]
            await asyncio.to_thread(
                hostile.publish, link.reply_topic, payload, correlation=correlation
            )
            await asyncio.to_thread(hostile.publish, f"anyfill/fim/{POOL}/workers/evil", DEEP)
            await asyncio.sleep(0.3)
            second = await engine.complete(request())
            third = await engine.complete(request())
    assert first.backend == second.backend == third.backend == "pool"
    assert third.middle == "return a + b"
    assert link.connected.is_set()


def _absurd_retry_after(request_id: str) -> list[bytes]:
    return [
        b'{"id": "' + request_id.encode() + b'", "type": "final", "ok": false, '
        b'"error": {"kind": "rate_limited", "message": "slow down", '
        b'"retry_after": 1' + b"0" * 400 + b"}}"
    ]


def _two_mib_chunk(request_id: str) -> list[bytes]:
    chunk = {"id": request_id, "type": "chunk", "text": "x" * (2 << 20)}
    final = {"id": request_id, "type": "final", "ok": True}
    return [json.dumps(chunk).encode(), json.dumps(final).encode()]


FAKE_WORKER_REPLIES = {"absurd-retry-after": _absurd_retry_after, "2-MiB-chunk": _two_mib_chunk}


@pytest.mark.parametrize("case", sorted(FAKE_WORKER_REPLIES))
async def test_a_worker_answer_out_of_bounds_is_a_plain_fallback(
    broker: Broker, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    """A 'worker' (a paho client) answers with retry_after 10^400, or one 2 MiB chunk."""
    responder = LlamaCpp(default=Reply(text="return b + a"))
    with LoopbackServer.in_thread(responder) as direct, Probe(broker.port) as fake_worker:
        fake_worker.subscribe(f"anyfill/fim/{POOL}/request")

        def answer() -> None:
            asked = fake_worker.next(10)
            assert asked.response_topic is not None
            for body in FAKE_WORKER_REPLIES[case](json.loads(asked.payload)["id"]):
                fake_worker.publish(asked.response_topic, body, correlation=asked.correlation)

        async with Engine(desktop(broker, direct.url, deadline_s=5)) as engine:
            answering = asyncio.create_task(asyncio.to_thread(answer))
            done = await engine.complete(request())
            await answering
    assert done.backend == "direct"
    assert done.middle == "return b + a"
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


# -- a worker --------------------------------------------------------------------------------


def _pool_ask(probe: Probe, request_id: str, within: float = 10) -> dict[str, Any]:
    body = json.dumps({"id": request_id, "prefix": "a = ", "suffix": "\n"})
    probe.publish(
        f"anyfill/fim/{POOL}/request",
        body,
        response_topic="probe/replies",
        correlation=request_id.encode(),
    )
    seen = probe.until(lambda m: m.topic == "probe/replies" and is_final(m), within)
    return dict(seen[-1].json())


def test_deep_nested_cancels_and_presences_never_end_a_workers_link(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    with workers(tmp_path, broker, gpu[1].url) as (worker,), Probe(broker.port) as probe:
        probe.subscribe("probe/replies")
        probe.publish(f"anyfill/fim/{POOL}/cancel", DEEP)
        probe.publish(f"anyfill/fim/{POOL}/workers/evil", DEEP)
        probe.publish(f"anyfill/fim/{POOL}/workers/evil2", b'{"state": "online", "since": [[[')
        finals = [_pool_ask(probe, f"after-{n}") for n in range(3)]
        log = worker.log()
    assert [f["ok"] for f in finals] == [True, True, True]
    assert log.count("connected to") == 1, "the worker reconnected"


def test_a_thousand_retained_fake_presences_do_not_shrink_the_real_workers_share(
    tmp_path: Path, broker: Broker, gpu: tuple[LlamaCpp, LoopbackServer]
) -> None:
    with Probe(broker.port) as faker:
        for number in range(1000):
            presence = json.dumps({"state": "online", "worker": f"fake{number}"})
            faker.client.publish(
                f"anyfill/fim/{POOL}/workers/fake{number}", presence, qos=0, retain=True
            )
        faker.publish(f"anyfill/fim/{POOL}/workers/last", b'{"state": "online"}', retain=True)
    limited = "[backends.limits]\nrequests_per_minute = 600"
    with (
        workers(tmp_path, broker, gpu[1].url, 1, "--limit-window-s", "2", extra=limited) as (
            worker,
        ),
        Probe(broker.port) as probe,
    ):
        probe.subscribe("probe/replies")
        started = time.monotonic()
        finals = [_pool_ask(probe, f"r{n}", within=20) for n in range(5)]
        took = time.monotonic() - started
        log = worker.log()
    assert [f["ok"] for f in finals] == [True] * 5
    assert took < 3.0, f"5 requests took {took:.1f} s"
    assert "1/1001" not in log
    assert "1/1002" not in log
    share_lines = [line for line in log.splitlines() if "pool share" in line]
    assert len(share_lines) <= 1
    assert "not counted" in log
    assert max(len(line) for line in log.splitlines()) < 1000


# -- what reaches the middle -----------------------------------------------------------------

HOSTILE_TEXT = "a\x1b[2Jb\x07c\x00d\x08e\u202ef\u2028g"
CLEAN_TEXT = "a[2Jbcdefg"


async def test_control_characters_never_reach_the_middle_over_http_or_a_pool(
    tmp_path: Path, broker: Broker
) -> None:
    responder = LlamaCpp(default=Reply(text=HOSTILE_TEXT))
    with (
        LoopbackServer.in_thread(responder) as server,
        workers(tmp_path, broker, server.url),
    ):
        async with Engine(desktop(broker, server.url)) as engine:
            pooled = await engine.complete(request())
            direct = await engine.complete(
                CompletionRequest(Context("a = ", "\n"), backends=("direct",))
            )
    assert pooled.backend == "pool"
    assert direct.backend == "direct"
    assert pooled.middle == CLEAN_TEXT
    assert direct.middle == CLEAN_TEXT


async def test_an_endless_answer_is_refused_over_http_and_over_a_pool(
    tmp_path: Path, broker: Broker
) -> None:
    huge = "x = 1  # " + "y" * 100_000
    responder = LlamaCpp(default=Reply(chunks=[huge] * 8))  # 800,000 characters
    with (
        LoopbackServer.in_thread(responder) as server,
        workers(tmp_path, broker, server.url),
    ):
        async with Engine(desktop(broker, None)) as engine:
            with pytest.raises(AnyfillError, match="more than 524288 characters"):
                await engine.complete(request())
        settings = Settings.model_validate(
            {
                "backends": [{"name": "direct", "type": "llamacpp", "url": server.url}],
                "routing": {"default": ["direct"]},
            }
        )
        async with Engine(settings) as engine:
            with pytest.raises(AnyfillError, match="more than 524288 characters"):
                await engine.complete(request())

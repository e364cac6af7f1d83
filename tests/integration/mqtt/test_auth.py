"""A broker with password auth and an ACL, as docs/mqtt.md sets one up for a team:
desktops may publish pool requests but not read them, only workers subscribe to them;
anonymous clients are refused; typing into a desktop from the broker needs an opt-in and
an authenticated daemon."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.mqtt.connection import BrokerSpec
from anyfill.daemon.mqtt.node import NodeBridge
from tests.integration.mqtt.test_pool import POOL, desktop, request, workers
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import Broker, Probe
from tests.servers.script import Reply

pytestmark = pytest.mark.broker

USERS = {"alice": "alice-pass", "worker": "worker-pass", "anyfill": "node-pass"}
ACL = f"""
# desktops: publish pool requests and cancels, read their own replies
user alice
topic write anyfill/fim/{POOL}/request
topic write anyfill/fim/{POOL}/cancel
topic read anyfill/fim/{POOL}/reply/#
topic read anyfill/fim/{POOL}/workers/+
topic readwrite anyfill/alice-desk/#

# workers: read requests, answer anywhere under the pool, announce themselves
user worker
topic read anyfill/fim/{POOL}/request
topic read anyfill/fim/{POOL}/cancel
topic readwrite anyfill/fim/{POOL}/workers/+
topic write anyfill/fim/{POOL}/reply/#

user anyfill
topic readwrite anyfill/#
"""


@pytest.fixture
def broker() -> Iterator[Broker]:
    with Broker.start(users=USERS, acl=ACL) as running:
        yield running


def test_an_unauthenticated_client_is_refused(broker: Broker) -> None:
    with Probe(broker.port) as anonymous:
        assert anonymous.connect_code == 135  # Not authorized
    with Probe(broker.port, username="alice", password="wrong") as guessing:
        assert guessing.connect_code in (134, 135)  # bad user name or password
    with Probe(broker.port, username="alice", password="alice-pass") as alice:
        assert alice.connect_code == 0


def test_a_desktop_may_publish_requests_but_never_read_them(broker: Broker, tmp_path: Path) -> None:
    with (
        Probe(broker.port, username="alice", password="alice-pass") as alice,
        Probe(broker.port, username="anyfill", password="node-pass") as other,
    ):
        alice.subscribe(f"anyfill/fim/{POOL}/request")
        other.publish(f"anyfill/fim/{POOL}/request", json.dumps({"id": "x"}))
        with pytest.raises(TimeoutError):
            alice.until(lambda m: True, within=1.0)


async def test_a_desktop_and_a_worker_with_their_own_accounts(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    responder = LlamaCpp(default=Reply(text="return a + b"))
    monkeypatch.setenv("ANYFILL_MQTT_PASSWORD", "worker-pass")  # read by the worker
    with (
        LoopbackServer.in_thread(responder) as server,
        workers(tmp_path, broker, server.url, 1, extra_mqtt='username = "worker"'),
    ):
        settings = desktop(broker, None)
        pool = settings.backends[0]
        pool.url = f"mqtt://alice@127.0.0.1:{broker.port}"
        pool.key_env = "POOL_PASSWORD"  # the desktop's broker password is the backend's key
        async with Engine(settings, environ={"POOL_PASSWORD": "alice-pass"}) as engine:
            done = await engine.complete(request())
    assert done.backend == "pool"
    assert done.middle == "return a + b"


async def _insert_reply(broker: Broker, spec: BrokerSpec, probe: Probe) -> dict[str, object]:
    settings = Settings.model_validate(
        {"mqtt": {"node": "alice-desk", "allow_remote_insert": True}}
    )
    triggered: list[str] = []
    bridge = NodeBridge(Engine(settings), settings, spec, trigger=triggered.append)
    task = asyncio.create_task(bridge.run())
    try:
        await asyncio.wait_for(bridge.connected.wait(), 10)
        await asyncio.to_thread(probe.subscribe, "anyfill/alice-desk/response")
        body = json.dumps({"id": "t", "insert": True})
        await asyncio.to_thread(probe.publish, "anyfill/alice-desk/request", body)
        reply: dict[str, object] = (await asyncio.to_thread(probe.next, 5)).json()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    reply["triggered"] = triggered
    return reply


async def test_typing_into_the_desktop_needs_an_authenticated_daemon(broker: Broker) -> None:
    spec = BrokerSpec("127.0.0.1", broker.port, username="anyfill", password="node-pass")
    with Probe(broker.port, username="alice", password="alice-pass") as alice:
        reply = await _insert_reply(broker, spec, alice)
    assert reply["ok"] is True
    assert reply["inserted"] == "requested"
    assert reply["triggered"] == ["complete"]
    with Broker.start() as open_broker, Probe(open_broker.port) as anyone:
        anonymous = BrokerSpec("127.0.0.1", open_broker.port)
        refused = await _insert_reply(open_broker, anonymous, anyone)
    assert refused["ok"] is False
    assert refused["triggered"] == []
    assert "authenticated" in str(refused["error"])

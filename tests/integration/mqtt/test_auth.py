"""A broker with password auth and an ACL, as docs/mqtt.md sets one up for a team:
desktops may publish pool requests but not read them, only workers subscribe to them;
anonymous clients are refused; typing into a desktop from the broker needs an opt-in, an
authenticated daemon and a request signed with the shared insert key, also (above all) on
a broker that lets anonymous clients in as well."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.mqtt.connection import BrokerSpec
from anyfill.daemon.mqtt.node import NodeBridge
from anyfill.daemon.mqtt.protocol import sign_insert
from tests.e2e.harness import MISSING, Daemon, XSession, daemon_config, wait_until
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


INSERT_KEY = "a shared secret for typing"
NODE_BASE = "anyfill/alice-desk"


def signed(request_id: str, key: str = INSERT_KEY, at: int | None = None) -> dict[str, object]:
    at = int(time.time()) if at is None else at
    sig = sign_insert(key, NODE_BASE, request_id, at)
    return {"id": request_id, "insert": True, "at": at, "sig": sig}


async def _insert_replies(
    spec: BrokerSpec, probe: Probe, bodies: list[dict[str, object]]
) -> tuple[list[dict[str, object]], list[str]]:
    """The node's final reply to each of ``bodies`` (sent by ``probe`` in turn), and what it
    typed."""
    settings = Settings.model_validate(
        {"mqtt": {"node": "alice-desk", "allow_remote_insert": True}}
    )
    triggered: list[str] = []
    bridge = NodeBridge(
        Engine(settings),
        settings,
        spec,
        trigger=triggered.append,
        insert_key=lambda: INSERT_KEY,
    )
    task = asyncio.create_task(bridge.run())
    replies: list[dict[str, object]] = []
    try:
        await asyncio.wait_for(bridge.connected.wait(), 10)
        await asyncio.to_thread(probe.subscribe, f"{NODE_BASE}/response")
        for body in bodies:
            await asyncio.to_thread(probe.publish, f"{NODE_BASE}/request", json.dumps(body))
            replies.append((await asyncio.to_thread(probe.next, 5)).json())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return replies, triggered


async def _insert_reply(broker: Broker, spec: BrokerSpec, probe: Probe) -> dict[str, object]:
    (reply,), triggered = await _insert_replies(spec, probe, [signed(f"t-{time.time()}")])
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


async def test_an_anonymous_client_cannot_make_the_desktop_type() -> None:
    """The daemon logs in with a password, the broker lets anonymous clients in too: only
    a request signed with the insert key types, once, and only while fresh."""
    with (
        Broker.start(users=USERS, anonymous=True) as broker,
        Probe(broker.port) as anonymous,
    ):
        assert anonymous.connect_code == 0  # the broker lets it in
        spec = BrokerSpec("127.0.0.1", broker.port, username="anyfill", password="node-pass")
        good = signed("ins-1")
        replies, triggered = await _insert_replies(
            spec,
            anonymous,
            [
                {"id": "plain", "insert": True},  # what an anonymous client sends
                signed("wrong-key", key="guessed"),
                signed("stale", at=int(time.time()) - 600),
                {**signed("forged"), "id": "forged-2"},  # a signature for another id
                good,
                good,  # the same message again: a replay by someone who read it
            ],
        )
    kinds = [r["error"]["kind"] if not r["ok"] else "ok" for r in replies]  # type: ignore[index]
    assert kinds == ["refused", "refused", "refused", "refused", "ok", "refused"]
    assert triggered == ["complete"]
    messages = [str(r.get("error")) for r in replies]
    assert "'at' and 'sig'" in messages[0]
    assert "does not match" in messages[1]
    assert "from now" in messages[2]
    assert "replay" in messages[5]


async def test_without_an_insert_key_nothing_types(broker: Broker) -> None:
    spec = BrokerSpec("127.0.0.1", broker.port, username="anyfill", password="node-pass")
    settings = Settings.model_validate(
        {"mqtt": {"node": "alice-desk", "allow_remote_insert": True}}
    )
    triggered: list[str] = []
    bridge = NodeBridge(
        Engine(settings), settings, spec, trigger=triggered.append, insert_key=lambda: None
    )
    task = asyncio.create_task(bridge.run())
    with Probe(broker.port, username="alice", password="alice-pass") as alice:
        try:
            await asyncio.wait_for(bridge.connected.wait(), 10)
            await asyncio.to_thread(alice.subscribe, f"{NODE_BASE}/response")
            body = json.dumps(signed("no-key"))
            await asyncio.to_thread(alice.publish, f"{NODE_BASE}/request", body)
            reply = (await asyncio.to_thread(alice.next, 5)).json()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert reply["ok"] is False
    assert "set-key mqtt-insert" in reply["error"]["message"]
    assert triggered == []


@pytest.mark.skipif(bool(MISSING), reason="the daemon needs Xvfb (.ci/apt-packages.txt)")
def test_the_running_daemon_reads_the_insert_key_and_refuses_an_unsigned_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``anyfill run`` end to end: the key from ANYFILL_MQTT_INSERT_KEY, a broker that lets
    anonymous clients in, an anonymous client's plain and signed requests."""
    monkeypatch.setenv("ANYFILL_MQTT_PASSWORD", "node-pass")
    monkeypatch.setenv("ANYFILL_MQTT_INSERT_KEY", INSERT_KEY)
    mqtt = """
[mqtt]
enabled = true
url = "{url}"
node = "alice-desk"
username = "anyfill"
allow_remote_insert = true
"""
    with (
        Broker.start(users=USERS, anonymous=True) as broker,
        LoopbackServer.in_thread(LlamaCpp()) as llama,
        XSession.start() as x,
    ):
        process = Daemon(x, daemon_config(llama.url, mqtt.format(url=broker.url)), name="ins")
        try:
            wait_until(lambda: "on the broker" in process.log(), 10, "the daemon on the broker")
            with Probe(broker.port) as anonymous:
                anonymous.subscribe(f"{NODE_BASE}/response")
                replies = []
                for body in ({"id": "plain", "insert": True}, signed("signed-1")):
                    anonymous.publish(f"{NODE_BASE}/request", json.dumps(body))
                    replies.append(anonymous.next(10).json())
        finally:
            process.stop()
        log = process.log()
    plain, good = replies
    assert plain["ok"] is False
    assert "'at' and 'sig'" in plain["error"]["message"]
    assert good["ok"] is True, good
    assert good["inserted"] == "requested"
    assert "a remote insert request was refused" in log

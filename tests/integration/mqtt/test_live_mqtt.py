"""Every ``[mqtt]`` key applies while ``anyfill run`` runs (issue 20): the node reads
``allow_remote_insert`` from the settings in force at each request, and any other change
restarts the broker link with the new values. A real mosquitto with password auth, a plain
paho client, and the daemon as its own process; the config file is edited as a user would.
"""

from __future__ import annotations

import contextlib
import json
import queue
import time
import uuid
from collections.abc import Iterator

import pytest

from anyfill.daemon.mqtt.protocol import sign_insert
from tests.e2e.harness import MISSING, Daemon, XSession, daemon_config, wait_until
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import Broker, Probe

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(bool(MISSING), reason="the daemon needs Xvfb (.ci/apt-packages.txt)"),
]

USERS = {"anyfill": "node-pass", "alice": "alice-pass"}
INSERT_KEY = "the shared insert key"
ACL = """
user anyfill
topic readwrite anyfill/#
topic write client/#

user alice
topic readwrite anyfill/#
topic readwrite client/#
"""


@pytest.fixture
def broker() -> Iterator[Broker]:
    with Broker.start(users=USERS, acl=ACL) as running:
        yield running


@pytest.fixture
def x() -> Iterator[XSession]:
    with XSession.start() as session:
        session.env["ANYFILL_MQTT_PASSWORD"] = "node-pass"  # the daemon's broker password
        session.env["ANYFILL_MQTT_INSERT_KEY"] = INSERT_KEY  # what insert requests are signed with
        yield session


@pytest.fixture
def llama_url() -> Iterator[str]:
    with LoopbackServer.in_thread(LlamaCpp()) as server:
        yield server.url


def config(llama_url: str, broker: Broker, *, node: str, remote_insert: bool) -> str:
    return daemon_config(
        llama_url,
        f"""
[mqtt]
enabled = true
url = "mqtt://anyfill@127.0.0.1:{broker.port}"
node = "{node}"
allow_remote_insert = {"true" if remote_insert else "false"}
""",
    )


def rewrite(daemon: Daemon, text: str) -> None:
    """Save the file as an editor does (a new file renamed over the old one)."""
    fresh = daemon.config_path.with_suffix(".new")
    fresh.write_text(text)
    fresh.replace(daemon.config_path)


def insert_reply(probe: Probe, node: str) -> dict[str, object]:
    reply_topic = f"client/{uuid.uuid4().hex}/reply"
    probe.subscribe(reply_topic)
    request_id, at = uuid.uuid4().hex[:8], int(time.time())
    sig = sign_insert(INSERT_KEY, f"anyfill/{node}", request_id, at)  # docs/mqtt.md
    probe.publish(
        f"anyfill/{node}/request",
        json.dumps({"id": request_id, "insert": True, "at": at, "sig": sig}),
        response_topic=reply_topic,
    )
    seen = probe.until(
        lambda m: m.topic == reply_topic and m.json().get("type") == "final", within=10
    )
    final: dict[str, object] = seen[-1].json()
    return final


def test_remote_insertion_switched_off_in_the_file_is_refused_without_a_restart(
    x: XSession, broker: Broker, llama_url: str
) -> None:
    daemon = Daemon(x, config(llama_url, broker, node="live-desk", remote_insert=True))
    try:
        wait_until(lambda: "on the broker" in daemon.log(), 10, "the daemon on the broker")
        with Probe(broker.port, username="alice", password="alice-pass") as alice:
            before = insert_reply(alice, "live-desk")
            assert before["ok"] is True, before
            rewrite(daemon, config(llama_url, broker, node="live-desk", remote_insert=False))
            switched = time.monotonic()
            refused: dict[str, object] = {}
            while time.monotonic() - switched < 5:
                refused = insert_reply(alice, "live-desk")
                if refused["ok"] is False:
                    break
                time.sleep(0.1)
        assert refused["ok"] is False, refused
        assert "allow_remote_insert" in json.dumps(refused["error"])
        assert daemon.process.poll() is None
        # Read live at each request: the broker link was not restarted for it.
        assert daemon.log().count("on the broker") == 1
    finally:
        daemon.stop()


def test_a_new_node_name_applies_live_and_the_old_one_goes_offline(
    x: XSession, broker: Broker, llama_url: str
) -> None:
    daemon = Daemon(x, config(llama_url, broker, node="first-desk", remote_insert=False))
    try:
        wait_until(lambda: "on the broker" in daemon.log(), 10, "the daemon on the broker")
        rewrite(daemon, config(llama_url, broker, node="second-desk", remote_insert=False))
        with Probe(broker.port, username="alice", password="alice-pass") as alice:
            alice.subscribe("anyfill/+/status")

            seen: dict[str, str] = {}

            def settled() -> bool:
                with contextlib.suppress(queue.Empty):
                    while True:
                        message = alice.next(within=0.2)
                        seen[message.topic] = str(message.json().get("state", ""))
                return (
                    seen.get("anyfill/second-desk/status") == "online"
                    and seen.get("anyfill/first-desk/status") == "offline"
                )

            wait_until(settled, 15, "the status under the new node name")
        assert "[mqtt] changed (node): the broker link restarts" in daemon.log()
        assert daemon.process.poll() is None
    finally:
        daemon.stop()

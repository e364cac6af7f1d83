"""The daemon on a real broker: a plain paho client talks to ``anyfill run --headless``.

One mosquitto, one Xvfb, one loopback llama.cpp responder and one daemon for the module;
the tests that restart the broker or kill the daemon come last and start their own.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.harness import MISSING, Daemon, XSession, daemon_config, wait_until
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import Broker, Probe, Received
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(bool(MISSING), reason="the daemon needs Xvfb (.ci/apt-packages.txt)"),
]

NODE = "desk"


def mqtt_section(broker: Broker, extra: str = "") -> str:
    return f"""
[mqtt]
enabled = true
url = "{broker.url}"
node = "{NODE}"
{extra}
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker.start() as running:
        yield running


@pytest.fixture(scope="module")
def x() -> Iterator[XSession]:
    with XSession.start() as session:
        yield session


@pytest.fixture(scope="module")
def llama() -> Iterator[tuple[LlamaCpp, LoopbackServer]]:
    responder = LlamaCpp()
    with LoopbackServer.in_thread(responder) as server:
        yield responder, server


@pytest.fixture(scope="module")
def daemon(x: XSession, llama: tuple[LlamaCpp, LoopbackServer], broker: Broker) -> Iterator[Daemon]:
    process = Daemon(x, daemon_config(llama[1].url, mqtt_section(broker)), name="mqtt-daemon")
    wait_until(lambda: "on the broker" in process.log(), 10, "the daemon on the broker")
    yield process
    process.stop()


def is_final(message: Received) -> bool:
    return bool(message.json().get("type") == "final")


def ask(
    probe: Probe, body: dict[str, object], within: float = 10, others: list[Received] | None = None
) -> list[Received]:
    """The replies to one request, up to its final one (anything else received meanwhile
    goes to ``others``)."""
    reply_topic = f"client/{uuid.uuid4().hex}/reply"
    probe.subscribe(reply_topic)
    correlation = uuid.uuid4().bytes
    probe.publish(
        f"anyfill/{NODE}/request",
        json.dumps(body),
        response_topic=reply_topic,
        correlation=correlation,
    )
    seen = probe.until(lambda m: m.topic == reply_topic and is_final(m), within)
    replies = [r for r in seen if r.topic == reply_topic]
    if others is not None:
        others.extend(r for r in seen if r.topic != reply_topic)
    assert all(r.correlation == correlation for r in replies)
    return replies


def test_a_request_gets_the_chunks_then_the_final_middle(
    daemon: Daemon, broker: Broker, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    llama[0].push(Reply(chunks=["return", " a", " + b"], chunk_delay_s=0.05))
    with Probe(broker.port) as probe:
        replies = ask(probe, {"id": "r1", "prefix": "def add(a, b):\n    ", "suffix": "\n"})
    chunks = [r.json() for r in replies[:-1]]
    final = replies[-1].json()
    assert [c["type"] for c in chunks] == ["chunk"] * 3
    assert "".join(c["text"] for c in chunks) == "return a + b"
    assert [c["seq"] for c in chunks] == [0, 1, 2]
    assert final["ok"] is True
    assert final["id"] == "r1"
    assert final["middle"] == "return a + b"
    assert final["backend"] == "stub"


def test_a_3_1_1_client_matches_replies_by_the_id_in_the_payload(
    daemon: Daemon, broker: Broker
) -> None:
    with Probe(broker.port, v5=False) as probe:
        probe.subscribe("old/replies")
        probe.publish(
            f"anyfill/{NODE}/request",
            json.dumps({"id": "old-1", "prefix": "x = ", "response_topic": "old/replies"}),
        )
        replies = probe.until(is_final, 10)
        probe.subscribe(f"anyfill/{NODE}/response")
        probe.publish(f"anyfill/{NODE}/request", json.dumps({"id": "old-2", "prefix": "y = "}))
        default = probe.until(is_final, 10)
    assert {r.json()["id"] for r in replies} == {"old-1"}
    assert replies[-1].json()["ok"] is True
    assert default[-1].topic == f"anyfill/{NODE}/response"
    assert default[-1].json()["id"] == "old-2"
    assert default[-1].json()["ok"] is True


def test_cancel_closes_the_backend_stream(
    daemon: Daemon, broker: Broker, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    responder.push(Reply(chunks=["one"] * 40, chunk_delay_s=0.1))
    disconnects = len(server.disconnects)
    with Probe(broker.port) as probe:
        probe.subscribe("c/reply")
        probe.publish(
            f"anyfill/{NODE}/request",
            json.dumps({"id": "slow", "prefix": "a", "suffix": "b"}),
            response_topic="c/reply",
            correlation=b"slow",
        )
        first = probe.next(10)
        assert first.json()["type"] == "chunk"
        probe.publish(f"anyfill/{NODE}/cancel", json.dumps({"id": "slow"}))
        replies = probe.until(is_final, 10)
    gone = server.wait_disconnect_sync(disconnects + 1, within=5)
    assert gone.chunks_sent < 40, "the backend streamed on after the cancel"
    final = replies[-1].json()
    assert final["ok"] is False
    assert final["error"]["kind"] == "cancelled"


BAD = [
    (b"{not json", "not JSON"),
    (json.dumps({"id": "t1", "prefix": 42}).encode(), "prefix"),
    (json.dumps({"id": "t2", "prefix": "a", "colour": "red"}).encode(), "colour"),
    (json.dumps({"id": "t3", "prefix": "a", "options": {"max_tokens": "9"}}).encode(), "tokens"),
    (json.dumps(["a", "list"]).encode(), "JSON object"),
    (b'{"id": "big", "prefix": "' + b"x" * 10_000_000 + b'"}', "over the"),
]


@pytest.mark.parametrize(("payload", "says"), BAD, ids=[s for _, s in BAD])
def test_a_bad_payload_gets_an_error_reply_and_the_daemon_goes_on(
    daemon: Daemon, broker: Broker, payload: bytes, says: str
) -> None:
    with Probe(broker.port) as probe:
        probe.subscribe("bad/reply")
        probe.publish(
            f"anyfill/{NODE}/request", payload, response_topic="bad/reply", correlation=b"bad"
        )
        reply = probe.until(is_final, 20)[-1]
        error = reply.json()
        assert reply.correlation == b"bad"
        assert error["ok"] is False
        assert error["error"]["kind"] == "bad_request"
        assert says in error["error"]["message"]
        good = ask(probe, {"prefix": "z = "})  # the daemon still answers
    assert good[-1].json()["ok"] is True
    assert daemon.process.poll() is None


def test_typing_into_the_desktop_is_refused_by_default(daemon: Daemon, broker: Broker) -> None:
    with Probe(broker.port) as probe:
        final = ask(probe, {"id": "ins", "insert": True})[-1].json()
    assert final["ok"] is False
    assert final["error"]["kind"] == "refused"
    assert "allow_remote_insert" in final["error"]["message"]


def test_status_is_retained_and_events_carry_no_text(daemon: Daemon, broker: Broker) -> None:
    with Probe(broker.port) as probe:
        probe.subscribe(f"anyfill/{NODE}/status")
        status = probe.next(5)
        assert status.retain
        body = status.json()
        assert body["state"] == "online"
        assert body["backends"] == {"stub": {"health": "ok"}}
        assert body["version"]
        probe.subscribe(f"anyfill/{NODE}/events")
        events: list[Received] = []
        ask(probe, {"id": "ev", "prefix": "SECRET_PREFIX", "suffix": "SECRET_SUFFIX"}, 10, events)
        if not any(e.json().get("event") == "finished" for e in events):
            events += probe.until(lambda m: m.json().get("event") == "finished", 5)
    kinds = [e.json()["event"] for e in events if e.topic.endswith("/events")]
    assert "started" in kinds
    assert "attempt" in kinds
    assert "finished" in kinds
    for event in events:
        assert b"SECRET" not in event.payload
        if event.topic.endswith("/events") and event.json()["event"] == "finished":
            assert event.json()["backend"] == "stub"
            assert event.json()["ms"] > 0


def test_the_daemon_reconnects_after_the_broker_restarts(
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    # its own display: the module's daemon holds the hotkeys of the shared one
    with Broker.start() as broker, XSession.start() as x:
        process = Daemon(
            x, daemon_config(llama[1].url, mqtt_section(broker)), name="restart-daemon"
        )
        try:
            wait_until(lambda: "on the broker" in process.log(), 10, "connected")
            broker.stop()
            wait_until(lambda: "unreachable" in process.log(), 10, "the loss noticed")
            time.sleep(1.0)  # a few reconnect attempts against a closed port
            assert process.process.poll() is None
            broker.run()
            with Probe(broker.port) as probe:
                probe.subscribe(f"anyfill/{NODE}/status")  # retained again after reconnecting
                assert probe.next(40).json()["state"] == "online"
                final = ask(probe, {"id": "again", "prefix": "q = "})[-1].json()
            assert final["ok"] is True
        finally:
            process.stop()


def test_status_turns_offline_when_the_daemon_is_killed(
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    with Broker.start() as broker, XSession.start() as x:
        process = Daemon(x, daemon_config(llama[1].url, mqtt_section(broker)), name="kill-me")
        with Probe(broker.port) as probe:
            wait_until(lambda: "on the broker" in process.log(), 10, "connected")
            probe.subscribe(f"anyfill/{NODE}/status")
            assert probe.next(5).json()["state"] == "online"
            process.stop(signal.SIGKILL)
            will = probe.next(5)
        assert will.json() == {"state": "offline", "node": NODE}
        with Probe(broker.port) as late:  # a late subscriber sees the retained Will
            late.subscribe(f"anyfill/{NODE}/status")
            retained = late.next(5)
        assert retained.retain
        assert retained.json()["state"] == "offline"


def test_status_turns_offline_when_the_daemon_stops_cleanly(
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    with Broker.start() as broker, XSession.start() as x:
        process = Daemon(x, daemon_config(llama[1].url, mqtt_section(broker)), name="quit-me")
        with Probe(broker.port) as probe:
            probe.subscribe(f"anyfill/{NODE}/status")
            assert probe.next(10).json()["state"] == "online"
            assert process.stop(signal.SIGTERM) == 0
            said = probe.next(5)  # no Will on a clean disconnect: the daemon says it
        assert said.json() == {"state": "offline", "node": NODE}
        with Probe(broker.port) as late:
            late.subscribe(f"anyfill/{NODE}/status")
            assert late.next(5).json()["state"] == "offline"

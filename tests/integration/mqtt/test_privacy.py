"""Captured text and the broker: a server whose error repeats the prompt.

A server's error body is captured text (it may repeat the prompt). What goes to the broker
depends on ``privacy.mqtt_text`` alone; the log keeps following ``privacy.log_text``. Each
case runs a real ``anyfill run --headless`` (or ``anyfill worker``) against a loopback
llama.cpp server whose every completion fails with a 500 that echoes the request, and a
plain client subscribed to everything on a real mosquitto.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import MISSING, Daemon, XSession, daemon_config, wait_until
from tests.integration.mqtt.test_pool import POOL, WorkerProcess
from tests.servers.http import LoopbackServer, Response
from tests.servers.llamacpp import LlamaCpp, llama_error
from tests.servers.mosquitto import Broker, Probe, Received
from tests.servers.script import Reply

pytestmark = pytest.mark.broker

SECRET = "zq_private_token_5531"
"""A word of the user's document; the echoing server repeats it in its error."""


class EchoesThePrompt(LlamaCpp):
    """llama-server whose completions all fail with a 500 repeating the request's text."""

    async def _answer(self, body: dict[str, Any], reply: Reply, response: Response) -> None:
        said = f"{body.get('input_prefix', '')}{body.get('prompt', '')}"
        message = f"slot failed while decoding: {said}"
        await response.json(500, llama_error(500, "server_error", message))


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker.start() as running:
        yield running


@pytest.fixture(scope="module")
def echoing() -> Iterator[LoopbackServer]:
    with LoopbackServer.in_thread(EchoesThePrompt()) as server:
        yield server


@pytest.fixture(scope="module")
def x() -> Iterator[XSession]:
    if MISSING:
        pytest.skip("the daemon needs Xvfb (.ci/apt-packages.txt)")
    with XSession.start() as session:
        yield session


def privacy(log_text: bool, mqtt_text: bool) -> str:
    return f"[privacy]\nlog_text = {str(log_text).lower()}\nmqtt_text = {str(mqtt_text).lower()}\n"


def collect(probe: Probe) -> list[Received]:
    """``until`` keeps what it saw only when it returns: read the queue by hand."""
    seen: list[Received] = []
    while True:
        try:
            seen.append(probe.next(0.5))
        except Exception:  # queue.Empty: quiet for half a second
            return seen


CASES = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize(("log_text", "mqtt_text"), CASES, ids=lambda v: "on" if v else "off")
def test_a_servers_words_reach_the_broker_only_with_mqtt_text(
    log_text: bool, mqtt_text: bool, x: XSession, broker: Broker, echoing: LoopbackServer
) -> None:
    name = f"priv-{int(log_text)}{int(mqtt_text)}"  # its own node: statuses are retained
    extra = f'[mqtt]\nenabled = true\nurl = "{broker.url}"\nnode = "{name}"\n'
    config = daemon_config(echoing.url, extra + privacy(log_text, mqtt_text))
    daemon = Daemon(x, config, name=name)
    try:
        wait_until(lambda: "on the broker" in daemon.log(), 10, "the daemon on the broker")
        with Probe(broker.port) as probe:
            probe.subscribe(f"anyfill/{name}/#")
            probe.subscribe("client/#")
            reply_topic = f"client/{uuid.uuid4().hex}/reply"
            request = {"id": "p1", "prefix": f"total = {SECRET} + ", "suffix": "\n"}
            probe.publish(
                f"anyfill/{name}/request",
                json.dumps(request),
                response_topic=reply_topic,
                correlation=b"c1",
            )
            seen = probe.until(
                lambda m: m.topic == reply_topic and m.json().get("type") == "final", 15
            )
            seen += collect(probe)  # the failed event and the cooling status around it
    finally:
        daemon.stop()
    published = [m for m in seen if m.topic != f"anyfill/{name}/request"]  # ours, not its
    final = next(m.json() for m in published if m.topic == reply_topic)
    failed = [m.json() for m in published if m.topic.endswith("/events")]
    failed = [e for e in failed if e.get("event") == "failed"]
    cooling = [
        m.json()["backends"]["stub"]
        for m in published
        if m.topic == f"anyfill/{name}/status"
        and m.json()["backends"]["stub"]["health"] == "cooling"
    ]
    assert final["ok"] is False
    assert final["error"]["kind"] == "server_error"
    assert len(failed) == 1
    assert cooling, "the status names the cooling backend and why"
    texts = [final["error"]["message"], failed[0]["error"], cooling[-1]["reason"]]
    if mqtt_text:  # opted in: the server's own words, on every topic that tells the error
        for text in texts:
            assert f"server said: slot failed while decoding: total = {SECRET}" in text
    else:
        for message in published:
            assert SECRET.encode() not in message.payload, message.topic
            assert b"slot failed" not in message.payload, message.topic
        # What the client can act on stays: our words, the length, and the switch to set.
        assert "backend 'stub' failed with HTTP 500" in final["error"]["message"]
        assert "characters, is hidden" in final["error"]["message"]
        assert "privacy.mqtt_text = true" in final["error"]["message"]
        assert "characters, is hidden" in failed[0]["error"]
        assert "characters, is hidden" in cooling[-1]["reason"]
    # The log follows log_text, whatever MQTT does.
    assert "failed with HTTP 500" in daemon.log()
    assert (SECRET in daemon.log()) is log_text


@pytest.mark.parametrize("mqtt_text", [False, True], ids=["mqtt_text-off", "mqtt_text-on"])
def test_a_workers_error_reply_carries_the_servers_words_only_with_its_mqtt_text(
    mqtt_text: bool, tmp_path: Path, broker: Broker, echoing: LoopbackServer
) -> None:
    # log_text on: the worker's own log may show the text, its replies still may not.
    worker = WorkerProcess(
        tmp_path, broker, echoing.url, "pw", extra=privacy(log_text=True, mqtt_text=mqtt_text)
    )
    try:
        with Probe(broker.port) as probe:
            probe.subscribe(f"anyfill/fim/{POOL}/#")  # everything of the pool
            reply_topic = f"anyfill/fim/{POOL}/reply/probe"
            body = {"id": "w1", "prefix": f"total = {SECRET} + ", "suffix": "\n"}
            probe.publish(
                f"anyfill/fim/{POOL}/request",
                json.dumps(body),
                response_topic=reply_topic,
                correlation=b"w1",
            )
            seen = probe.until(
                lambda m: m.topic == reply_topic and m.json().get("type") == "final", 15
            )
            seen += collect(probe)
    finally:
        worker.stop()
    published = [m for m in seen if not m.topic.endswith("/request")]
    final = next(m.json() for m in published if m.topic == reply_topic)
    assert final["ok"] is False
    error = final["error"]
    assert error["kind"] == "server_error"
    assert SECRET not in error["message"]  # the desktop shows it by its own switches
    assert "characters, is hidden" in error["message"]
    if mqtt_text:
        assert (
            f"server said: slot failed while decoding: total = {SECRET}"
            in error["message_with_text"]
        )
    else:
        assert "message_with_text" not in error
        for message in published:
            assert SECRET.encode() not in message.payload, message.topic
    assert SECRET in worker.log()  # its own log: log_text is on


def test_turning_mqtt_text_on_while_running_takes_effect_at_once(
    x: XSession, broker: Broker, echoing: LoopbackServer
) -> None:
    name = "priv-live"
    extra = f'[mqtt]\nenabled = true\nurl = "{broker.url}"\nnode = "{name}"\n'
    daemon = Daemon(x, daemon_config(echoing.url, extra + privacy(False, False)), name=name)
    try:
        wait_until(lambda: "on the broker" in daemon.log(), 10, "the daemon on the broker")
        with Probe(broker.port) as probe:
            probe.subscribe("live/#")
            for n, mqtt_text in enumerate((False, True)):
                if mqtt_text:  # as the settings panel saves it
                    daemon.config_path.write_text(
                        daemon_config(echoing.url, extra + privacy(False, True))
                    )
                    wait_until(lambda: "settings reloaded" in daemon.log(), 10, "the reload")
                body = {"id": f"l{n}", "prefix": f"total = {SECRET} + ", "suffix": "\n"}
                probe.publish(
                    f"anyfill/{name}/request",
                    json.dumps(body),
                    response_topic=f"live/{n}",
                    correlation=b"l",
                )
                final = probe.until(lambda m, n=n: m.topic == f"live/{n}", 15)[-1].json()
                assert (SECRET in final["error"]["message"]) is mqtt_text
    finally:
        daemon.stop()

"""The node bridge in-process, over a real broker: captured text in events only when the user
opts in, and completions go on while the broker is away (the tray hears of it on the bus)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.bus import BrokerStatus, EventBus
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.mqtt.connection import spec_from_config
from anyfill.daemon.mqtt.messages import Chunk, Final, read_reply
from anyfill.daemon.mqtt.node import NodeBridge
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mosquitto import Broker, Probe
from tests.servers.script import Reply

pytestmark = pytest.mark.broker


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer.in_thread(LlamaCpp(default=Reply(text="return a + b"))) as running:
        yield running


def settings_for(broker: Broker, server: LoopbackServer, mqtt_text: bool) -> Settings:
    return Settings.model_validate(
        {
            "backends": [{"name": "local", "type": "llamacpp", "url": server.url}],
            "routing": {"default": ["local"]},
            "mqtt": {"enabled": True, "url": broker.url, "node": "desk"},
            "privacy": {"mqtt_text": mqtt_text},
        }
    )


async def test_events_carry_the_text_only_when_the_user_opts_in(server: LoopbackServer) -> None:
    with Broker.start() as broker, Probe(broker.port) as probe:
        probe.subscribe("anyfill/desk/events")
        settings = settings_for(broker, server, mqtt_text=True)
        bus = EventBus()
        async with Engine(settings, bus=bus) as engine:
            bridge = NodeBridge(
                engine, settings, spec_from_config(settings.mqtt, environ={}), bus=bus
            )
            task = asyncio.create_task(bridge.run())
            await asyncio.wait_for(bridge.connected.wait(), 10)
            await engine.complete(CompletionRequest(Context("PREFIX_TEXT", "SUFFIX_TEXT")))
            events = await asyncio.to_thread(
                probe.until, lambda m: m.json()["event"] == "finished", 5
            )
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    bodies = {m.json()["event"]: m.json() for m in events}
    assert bodies["started"]["prefix"] == "PREFIX_TEXT"
    assert bodies["started"]["suffix"] == "SUFFIX_TEXT"
    assert bodies["finished"]["middle"] == "return a + b"


async def test_completions_go_on_while_the_broker_is_away(server: LoopbackServer) -> None:
    with Broker.start() as broker:
        settings = settings_for(broker, server, mqtt_text=False)
        bus = EventBus()
        states = bus.subscribe(BrokerStatus)
        async with Engine(settings, bus=bus) as engine:
            bridge = NodeBridge(
                engine, settings, spec_from_config(settings.mqtt, environ={}), bus=bus
            )
            task = asyncio.create_task(bridge.run())
            await asyncio.wait_for(bridge.connected.wait(), 10)
            broker.stop()
            down: BrokerStatus = await asyncio.wait_for(anext(states), 10)
            while down.connected:
                down = await asyncio.wait_for(anext(states), 10)
            done = await engine.complete(CompletionRequest(Context("a = ", "")))
            broker.run()
            up: BrokerStatus = await asyncio.wait_for(anext(states), 40)
            while not up.connected:
                up = await asyncio.wait_for(anext(states), 40)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert done.middle == "return a + b"
    assert down.url == broker.url
    assert not down.connected
    assert down.reason
    assert up.connected


async def test_a_daemon_on_mqtt_3_1_1_answers_by_the_id_in_the_payload(
    server: LoopbackServer,
) -> None:
    with Broker.start() as broker, Probe(broker.port, v5=False) as probe:
        settings = settings_for(broker, server, mqtt_text=False)
        settings.mqtt.protocol = "3.1.1"
        async with Engine(settings) as engine:
            bridge = NodeBridge(engine, settings, spec_from_config(settings.mqtt, environ={}))
            task = asyncio.create_task(bridge.run())
            await asyncio.wait_for(bridge.connected.wait(), 10)
            await asyncio.to_thread(probe.subscribe, "plain/replies")
            body = '{"id": "p1", "prefix": "a = ", "response_topic": "plain/replies"}'
            await asyncio.to_thread(probe.publish, "anyfill/desk/request", body)
            replies = await asyncio.to_thread(
                probe.until, lambda m: m.json()["type"] == "final", 10
            )
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert replies[-1].json()["id"] == "p1"
    assert replies[-1].json()["middle"] == "return a + b"
    assert all(reply.json()["id"] == "p1" for reply in replies)


# paho leaves the SSL socket of a failed handshake to the garbage collector, which closes it
# and warns; the warning is about paho, the test is about our CA handling.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_over_tls_the_broker_is_checked_against_the_given_ca(server: LoopbackServer) -> None:
    import aiomqtt

    from anyfill.daemon.mqtt.connection import BrokerClient

    with Broker.start(tls=True) as broker:
        assert broker.ca is not None
        settings = settings_for(broker, server, mqtt_text=False)
        settings.mqtt.tls_ca = str(broker.ca)
        spec = spec_from_config(settings.mqtt, environ={})
        assert spec.tls
        async with Engine(settings) as engine:
            bridge = NodeBridge(engine, settings, spec)
            task = asyncio.create_task(bridge.run())
            await asyncio.wait_for(bridge.connected.wait(), 10)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        settings.mqtt.tls_ca = ""  # the system's CAs do not know this broker
        untrusted = spec_from_config(settings.mqtt, environ={})
        with pytest.raises((aiomqtt.MqttError, OSError), match=r"(?i)certificate"):
            async with BrokerClient(untrusted):
                pass


async def test_the_node_forwards_each_chunk_and_marks_where_a_fallback_starts_over() -> None:
    """The engine hands the node each piece as it streams (no text joined and diffed back);
    the first piece of a fallback backend says ``replace``."""
    breaking = LlamaCpp(default=Reply(chunks=["ret", "urn", " x", " y"], drop_after=2))
    steady = LlamaCpp(default=Reply(chunks=["return", " b"], chunk_delay_s=0.02))
    with (
        LoopbackServer.in_thread(breaking) as first,
        LoopbackServer.in_thread(steady) as second,
        Broker.start() as broker,
        Probe(broker.port) as probe,
    ):
        settings = Settings.model_validate(
            {
                "backends": [
                    {"name": "first", "type": "llamacpp", "url": first.url},
                    {"name": "second", "type": "llamacpp", "url": second.url},
                ],
                "routing": {"default": ["first", "second"]},
                "mqtt": {"enabled": True, "url": broker.url, "node": "desk"},
            }
        )
        async with Engine(settings) as engine:
            bridge = NodeBridge(engine, settings, spec_from_config(settings.mqtt, environ={}))
            task = asyncio.create_task(bridge.run())
            await asyncio.wait_for(bridge.connected.wait(), 10)
            await asyncio.to_thread(probe.subscribe, "fb/replies")
            body = '{"id": "fb", "prefix": "def f():\\n    ", "suffix": "\\n"}'
            await asyncio.to_thread(
                probe.publish, "anyfill/desk/request", body, response_topic="fb/replies"
            )
            replies = await asyncio.to_thread(
                probe.until, lambda m: m.json()["type"] == "final", 10
            )
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    chunks = [read_reply(r.payload) for r in replies[:-1]]
    assert [(c.text, c.replace) for c in chunks if isinstance(c, Chunk)] == [
        ("ret", None),
        ("urn", None),
        ("return", True),
        (" b", None),
    ]
    assert [c.seq for c in chunks if isinstance(c, Chunk)] == [0, 1, 2, 3]
    final = read_reply(replies[-1].payload)
    assert isinstance(final, Final)
    assert final.middle == "return b"
    assert final.backend == "second"

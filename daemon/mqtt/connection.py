"""One connection to an MQTT broker: settings, the client, and the reconnect loop.

aiomqtt 2.x has no automatic reconnect; its documented pattern is to re-enter
``async with client`` in a loop that catches ``MqttError``. ``keep_connected`` does that
with exponential backoff and full jitter (so a restarted broker is not hit by every
client at the same instant) and calls the session again on each connection, which
subscribes again: sessions are clean, so the broker keeps nothing for us.

``BrokerClient`` adds what aiomqtt 2.x drops: the reason code of a QoS 1 PUBACK (a worker
pool needs 0x10, "no matching subscribers", to fall back at once), and a publish that does
not wait for its acknowledgement (replies stream in order on one socket; waiting for each
PUBACK would add a round trip per chunk).
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import aiomqtt
import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from anyfill.config.model import MqttConfig

log = logging.getLogger("anyfill.mqtt")

NO_MATCHING_SUBSCRIBERS = 0x10
"""PUBACK reason code: the broker accepted the message but nobody subscribes to it."""

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


@dataclass(frozen=True)
class BrokerSpec:
    """Where and how to connect; ``password`` never appears in ``repr``."""

    host: str
    port: int
    tls: bool = False
    username: str = ""
    password: str = ""
    protocol: Literal["5", "3.1.1"] = "5"
    client_id: str = ""
    keepalive_s: int = 30
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    def __repr__(self) -> str:
        return f"BrokerSpec({self.url!r}, protocol={self.protocol})"

    @property
    def url(self) -> str:
        user = f"{self.username}@" if self.username else ""
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}{self.host}:{self.port}"

    @property
    def authenticated(self) -> bool:
        """The broker knows who we are: a password or a TLS client certificate."""
        return bool((self.username and self.password) or (self.tls and self.tls_cert))

    @property
    def v5(self) -> bool:
        return self.protocol == "5"


def parse_broker_url(url: str) -> tuple[str, int, bool, str]:
    """``mqtt[s]://[user@]host[:port]`` -> host, port, tls, user."""
    parts = urlsplit(url)
    tls = parts.scheme == "mqtts"
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (8883 if tls else 1883)
    return host, port, tls, unquote(parts.username or "")


def spec_from_config(
    config: MqttConfig,
    *,
    client_id: str = "",
    environ: Mapping[str, str] | None = None,
) -> BrokerSpec:
    """The ``[mqtt]`` section as a connection; the password from the keyring or environment."""
    from anyfill.config.secrets import resolve_broker_password

    host, port, tls, user = parse_broker_url(config.url)
    return BrokerSpec(
        host=host,
        port=port,
        tls=tls,
        username=config.username or user,
        password=resolve_broker_password(config.password_key, environ) or "",
        protocol=config.protocol,
        client_id=config.client_id or client_id or f"anyfill-{config.node}",
        keepalive_s=config.keepalive_s,
        tls_ca=config.tls_ca,
        tls_cert=config.tls_cert,
        tls_key=config.tls_key,
    )


def make_tls_context(spec: BrokerSpec) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=spec.tls_ca or None)
    if spec.tls_cert:
        context.load_cert_chain(spec.tls_cert, spec.tls_key or None)
    return context


class BrokerClient(aiomqtt.Client):
    """aiomqtt's client plus PUBACK reason codes and publishing without waiting."""

    def __init__(self, spec: BrokerSpec, *, will: aiomqtt.Will | None = None) -> None:
        super().__init__(
            spec.host,
            spec.port,
            username=spec.username or None,
            password=spec.password or None,
            identifier=spec.client_id or None,
            protocol=aiomqtt.ProtocolVersion.V5 if spec.v5 else aiomqtt.ProtocolVersion.V311,
            will=will,
            keepalive=spec.keepalive_s,
            timeout=10,
            tls_context=make_tls_context(spec) if spec.tls else None,
            max_queued_incoming_messages=10_000,
            # Small messages one after another: without this, Nagle's algorithm and the
            # peer's delayed ACK hold a reply back for up to 40 ms.
            socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),),
        )
        self.spec = spec
        self._acks: dict[int, asyncio.Future[int]] = {}

    def _on_publish(
        self,
        client: paho.Client,
        userdata: Any,
        mid: int,
        reason_code: ReasonCode,
        properties: Properties,
    ) -> None:
        waiter = self._acks.pop(mid, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(int(reason_code.value))
        super()._on_publish(client, userdata, mid, reason_code, properties)

    def send(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> int:
        """Queue a message in order and return its message id without waiting for the ack."""
        info = self._client.publish(topic, payload, qos, retain, properties)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
        return int(info.mid)

    async def publish_acked(
        self, topic: str, payload: bytes, *, properties: Properties | None, wait_s: float
    ) -> int:
        """Publish at QoS 1 and return the PUBACK's reason code (0 on MQTT 3.1.1)."""
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        mid = self.send(topic, payload, qos=1, properties=properties)
        self._acks[mid] = waiter
        try:
            return await asyncio.wait_for(waiter, wait_s)
        except TimeoutError:
            raise aiomqtt.MqttError("the broker did not acknowledge in time") from None
        finally:
            self._acks.pop(mid, None)


def publish_properties(
    *,
    response_topic: str | None = None,
    correlation: bytes | None = None,
    expiry_s: int | None = None,
    content_type: str | None = "application/json",
) -> Properties:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if response_topic:
        properties.ResponseTopic = response_topic
    if correlation is not None:
        properties.CorrelationData = correlation
    if expiry_s is not None:
        properties.MessageExpiryInterval = max(1, expiry_s)
    if content_type:
        properties.ContentType = content_type
    return properties


def backoff_delays(
    first: float = BACKOFF_FIRST_S, most: float = BACKOFF_MAX_S
) -> Callable[[int], float]:
    """Attempt number -> seconds to wait: doubling up to ``most``, full jitter in [½, 1]."""

    def delay(attempt: int) -> float:
        base: float = min(most, first * 2.0**attempt)
        return base * random.uniform(0.5, 1.0)  # jitter, not cryptography

    return delay


def raise_if_cancelled() -> None:
    """Re-raise a cancel that an aiomqtt call swallowed.

    aiomqtt waits for acknowledgements with ``asyncio.wait_for``, which on Python 3.11
    returns the result instead of raising when the cancel and the acknowledgement arrive
    together; the task is still marked as cancelling. Call this after such awaits.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


StateCallback = Callable[[bool, str], None]


async def keep_connected(
    client: BrokerClient,
    session: Callable[[BrokerClient], Awaitable[None]],
    on_state: StateCallback,
    *,
    delay: Callable[[int], float] | None = None,
) -> None:
    """Connect, run ``session`` (subscribe, then read messages), and on any connection loss
    wait with backoff and jitter and do it again, until cancelled."""
    wait = delay or backoff_delays()
    attempt = 0
    task = asyncio.current_task()
    while True:
        try:
            async with client:
                attempt = 0
                on_state(True, "")
                await session(client)
        except (aiomqtt.MqttError, OSError) as error:  # OSError: refused before MQTT began
            if task is not None and task.cancelling():
                # Disconnecting on cancel can fail too (aiomqtt raises from __aexit__):
                # the cancel must win, or the loop would reconnect forever.
                raise asyncio.CancelledError from error
            reason = str(error) or error.__class__.__name__
            on_state(False, reason)
            log.info("broker %s: %s; retrying", client.spec.url, reason)
        except Exception as error:  # a bug in a session: log it, and keep the link alive
            log.exception("broker %s: the session failed; reconnecting", client.spec.url)
            on_state(False, f"internal error: {type(error).__name__}")
        await asyncio.sleep(wait(attempt))
        attempt += 1


__all__ = [
    "NO_MATCHING_SUBSCRIBERS",
    "BrokerClient",
    "BrokerSpec",
    "backoff_delays",
    "keep_connected",
    "make_tls_context",
    "parse_broker_url",
    "publish_properties",
    "raise_if_cancelled",
    "spec_from_config",
]

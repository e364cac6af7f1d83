"""The daemon on a broker: retained status, events, and the request API of one node.

Topics (``<prefix>/<node>/...``, see ``topics.NodeTopics``):

- ``status``: retained JSON (``state`` online, version, each backend's health and
  cooldown); the Last Will replaces it with ``{"state": "offline"}`` when the process dies.
- ``events``: request started / finished / failed and each backend attempt (latency,
  backend, tokens). Captured text (prefix, suffix, middle) only with ``privacy.mqtt_text``.
- ``request``: a completion as JSON (``protocol.NodeRequest``), answered on the MQTT 5
  Response Topic with the same Correlation Data (else on the payload's ``response_topic``,
  else ``<node>/response``): ``chunk`` messages with the raw text as it streams, then one
  ``final`` message with the exact middle or the error. Every reply carries the request
  ``id`` so MQTT 3.1.1 clients can match them.
- ``cancel``: ``{"id": ...}`` stops that request; its upstream HTTP stream closes.

The API completes only. ``"insert": true`` (type into the desktop at the caret, as the
hotkey does) is refused unless ``mqtt.allow_remote_insert`` is on, this daemon's own
connection to the broker is authenticated, and the request is signed with the shared
insert key (HMAC-SHA256 over the node, the id and the time, ``protocol.insert_signed``):
a broker does not tell who published a message, and one that also lets anonymous
clients in would let anyone type. Every message is read with bounded size and depth;
a bad one costs one error reply or one log line, never the link.

While the broker is unreachable the daemon completes as usual; the link reconnects
with backoff and ``BrokerStatus`` on the bus tells the tray.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiomqtt

from anyfill.config.model import Settings
from anyfill.config.secrets import INSERT_KEY_ENV
from anyfill.daemon.bus import BrokerStatus, EventBus, RequestEnded, RequestStarted
from anyfill.daemon.bus.status import BackendsReady
from anyfill.daemon.completion import Completer, CompletionRequest, Streamed
from anyfill.daemon.context import Context
from anyfill.daemon.errors import AnyfillError, Told
from anyfill.daemon.mqtt.connection import (
    BrokerClient,
    BrokerSpec,
    keep_connected,
    publish_properties,
    raise_if_cancelled,
)
from anyfill.daemon.mqtt.messages import Chunk, Final, UsageInfo
from anyfill.daemon.mqtt.protocol import (
    INSERT_SKEW_S,
    CancelRequest,
    NodeRequest,
    PayloadError,
    dumps,
    error_json,
    insert_signed,
    parse,
    published,
    topic_problem,
)
from anyfill.daemon.mqtt.topics import NodeTopics
from anyfill.daemon.scheduler.events import AttemptFinished, CooldownChanged

log = logging.getLogger("anyfill.mqtt")

Trigger = Callable[[str], None]


class NodeBridge:
    def __init__(
        self,
        completer: Completer,
        settings: Settings,
        spec: BrokerSpec,
        *,
        bus: EventBus | None = None,
        backends: Sequence[str] | None = (),
        unusable: Mapping[str, str] | None = None,
        trigger: Trigger | None = None,
        version: str = "",
        current: Callable[[], Settings] | None = None,
        insert_key: Callable[[], str | None] | None = None,
    ) -> None:
        self.completer = completer
        self.settings = settings
        self._current_settings = current
        self.spec = spec
        self.bus = bus
        self.topics = NodeTopics(settings.mqtt.prefix, settings.mqtt.node)
        self.trigger = trigger
        self.version = version
        self._backends = list(backends) if backends is not None else None
        """None: not built yet, no status until ``BackendsReady`` says what they are (a
        client never reads a retained "online" that lists no backends)."""
        self._unusable = dict(unusable or {})
        self._cooling: dict[str, tuple[float, str]] = {}
        self._client: BrokerClient | None = None
        self._connected = False
        self._running: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._since = time.time()
        self.connected = asyncio.Event()
        self._insert_key = insert_key
        """The shared secret insert requests are signed with (read when one arrives)."""
        self._inserted: dict[str, float] = {}
        """Signed insert requests already used, by id, with when: a replay is refused."""

    @property
    def in_force(self) -> Settings:
        """The settings in force now (a reload or the panel may have changed them); the
        broker connection itself keeps the ones it was started with."""
        return self._current_settings() if self._current_settings else self.settings

    @property
    def with_text(self) -> bool:
        """privacy.mqtt_text as in force now."""
        return self.in_force.privacy.mqtt_text

    # -- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the node on the broker until cancelled."""
        will = aiomqtt.Will(self.topics.status, self._offline(), qos=1, retain=True)
        client = BrokerClient(self.spec, will=will)
        self._client = client
        removers: list[Callable[[], None]] = []
        if self.bus is not None:
            removers.append(self.bus.listen(self._on_cooldown, CooldownChanged))
            removers.append(self.bus.listen(self._on_backends, BackendsReady))
            removers.append(
                self.bus.listen(self._on_event, AttemptFinished, RequestStarted, RequestEnded)
            )
        try:
            await keep_connected(client, self._session, self._on_state)
        finally:
            for remove in removers:
                remove()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def _on_state(self, up: bool, reason: str) -> None:
        changed = up != self._connected
        self._connected = up
        if up:
            log.info("on the broker %s as node %s", self.spec.url, self.settings.mqtt.node)
        else:
            self.connected.clear()
            if changed:
                log.warning("broker %s unreachable: %s", self.spec.url, reason)
        if self.bus is not None and (changed or not up):
            self.bus.publish(BrokerStatus(self.spec.url, up, reason))

    async def _session(self, client: BrokerClient) -> None:
        if self._backends is not None:
            await client.publish(self.topics.status, self._status(), qos=1, retain=True)
        await client.subscribe(self.topics.request, qos=1)
        await client.subscribe(self.topics.cancel, qos=1)
        raise_if_cancelled()
        self.connected.set()
        try:
            async for message in client.messages:
                payload = message.payload if isinstance(message.payload, bytes) else b""
                if message.topic.value == self.topics.request:
                    task = asyncio.create_task(self._request(client, message, payload))
                    self._tasks.add(task)
                    task.add_done_callback(self._request_done)
                elif message.topic.value == self.topics.cancel:
                    try:
                        await self._cancel(payload)
                    except Exception:  # one bad message costs a log line, not the link
                        log.exception("a cancel from the broker failed")
                    raise_if_cancelled()
        except asyncio.CancelledError:
            # A clean stop: the broker sends the Will only for a connection that dies, so
            # the retained status would stay "online" after the daemon quit. Queued before
            # the DISCONNECT that leaving the client sends, so it goes out first.
            with contextlib.suppress(aiomqtt.MqttError):
                client.send(self.topics.status, self._offline(), qos=1, retain=True)
            raise

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            log.error("a request from the broker failed: %s", type(error).__name__, exc_info=error)

    def _offline(self) -> bytes:
        return dumps({"state": "offline", "node": self.settings.mqtt.node})

    # -- status and events -------------------------------------------------------------

    def _status(self) -> bytes:
        now = time.time()
        backends: dict[str, Any] = {}
        for name in self._backends or ():
            until, reason = self._cooling.get(name, (0.0, ""))
            if until > now:
                backends[name] = {"health": "cooling", "cooling_until": until, "reason": reason}
            else:
                backends[name] = {"health": "ok"}
        for name, reason in self._unusable.items():
            backends[name] = {"health": "unusable", "reason": reason}
        return dumps(
            {
                "state": "online",
                "node": self.settings.mqtt.node,
                "version": self.version,
                "since": self._since,
                "backends": backends,
            }
        )

    def _send(self, topic: str, body: bytes, *, retain: bool = False, **props: Any) -> None:
        client = self._client
        if client is None or not self._connected:
            return  # live telemetry: while the broker is away it is simply not sent
        # ValueError: paho refuses a topic it cannot publish to (checked before, but a
        # refused publish must never end the request's task with an unread exception)
        with contextlib.suppress(aiomqtt.MqttError, ValueError):
            properties = publish_properties(**props) if self.spec.v5 else None
            client.send(topic, body, qos=1, retain=retain, properties=properties)

    def _on_backends(self, event: BackendsReady) -> None:
        """The backends were built (after ready, or again by a reload): the status says so."""
        self._backends = list(event.backends)
        self._unusable = dict(event.unusable)
        self._cooling = {n: c for n, c in self._cooling.items() if n in event.backends}
        self._send(self.topics.status, self._status(), retain=True)

    def _on_cooldown(self, event: CooldownChanged) -> None:
        if event.cooling:
            reason = event.reason  # ours (a quota held) unless a failure caused it
            if event.cause is not None:
                reason = published(event.cause, with_text=self.with_text)
            self._cooling[event.backend] = (time.time() + event.seconds_left, reason)
        else:
            self._cooling.pop(event.backend, None)
        if self._backends is not None:
            self._send(self.topics.status, self._status(), retain=True)

    def _on_event(self, event: Any) -> None:
        body: dict[str, Any]
        if isinstance(event, RequestStarted):
            body = {"event": "started", "id": event.request_id, "priority": event.priority}
            body["method"] = event.method
            if self.with_text:
                body["prefix"], body["suffix"] = event.prefix, event.suffix
        elif isinstance(event, RequestEnded):
            body = {
                "event": "finished" if event.ok else "failed",
                "id": event.request_id,
                "backend": event.backend,
                "ms": round(event.ms, 2),
                "first_token_ms": event.first_token_ms,
                "prompt_tokens": event.prompt_tokens,
                "completion_tokens": event.completion_tokens,
            }
            if event.failure is not None:
                body["error"] = published(event.failure, with_text=self.with_text)
            elif event.error:
                body["error"] = event.error  # ours, no captured text ("cancelled")
            if self.with_text and event.ok:
                body["middle"] = event.middle
        else:
            attempt: AttemptFinished = event
            body = {
                "event": "attempt",
                "id": attempt.request_id,
                "backend": attempt.backend,
                "outcome": attempt.outcome,
                "queue_wait_ms": attempt.queue_wait_ms,
                "first_token_ms": attempt.first_token_ms,
                "total_ms": attempt.total_ms,
                "prompt_tokens": attempt.prompt_tokens,
                "completion_tokens": attempt.completion_tokens,
            }
        self._send(self.topics.events, dumps(body))

    # -- the request API ---------------------------------------------------------------

    def _reply(self, topic: str, message: Chunk | Final, correlation: bytes | None = None) -> None:
        self._send(topic, message.to_bytes(), correlation=correlation)

    async def _cancel(self, payload: bytes) -> None:
        try:
            cancel = parse(CancelRequest, payload)
        except PayloadError as error:
            log.info("a cancel was ignored: %s", error)
            return
        await self.completer.cancel(_internal_id(cancel.id))

    def _parse_request(
        self, properties: Any, payload: bytes, correlation: bytes | None
    ) -> tuple[NodeRequest, str, str] | None:
        """The request, its id and where its replies go; None when it was answered with
        an error already (a bad payload, a reply topic no one can publish to)."""
        reply_topic = getattr(properties, "ResponseTopic", None) if properties else None
        fallback = self.topics.response
        if isinstance(reply_topic, str) and topic_problem(reply_topic) is None:
            fallback = reply_topic
        try:
            request = parse(NodeRequest, payload)
        except PayloadError as error:
            log.info("a request from the broker was refused: %s", error)
            failure = Final.failure(error.request_id, "bad_request", str(error))
            self._reply(fallback, failure, correlation)
            return None
        request_id = request.id or uuid.uuid4().hex
        topic = reply_topic or request.response_topic or self.topics.response
        problem = topic_problem(topic)
        if problem is not None:
            # Publishing there would cost the connection (U+0000) or raise (wildcards):
            # the error goes to the node's own response topic instead.
            log.info("request %r refused: %s", request_id, problem)
            failure = Final.failure(request_id, "bad_request", problem)
            self._reply(self.topics.response, failure, correlation)
            return None
        return request, request_id, topic

    async def _request(
        self, client: BrokerClient, message: aiomqtt.Message, payload: bytes
    ) -> None:
        properties = message.properties
        correlation = getattr(properties, "CorrelationData", None) if properties else None
        if not isinstance(correlation, bytes):
            correlation = None
        answered = self._parse_request(properties, payload, correlation)
        if answered is None:
            return
        request, request_id, topic = answered

        def reply(body: Chunk | Final) -> None:
            self._reply(topic, body, correlation)

        if request.insert:
            reply(self._insert(request, request_id))
            return
        internal = _internal_id(request_id)
        if internal in self._running:
            running = f"request {request_id} is already running"
            reply(Final.failure(request_id, "bad_request", running))
            return
        options = request.options
        completion = CompletionRequest(
            context=Context(
                request.prefix,
                request.suffix,
                app=f"mqtt:{request.target or internal}",
                method="mqtt",
                language=options.language,
                filename=options.filename,
            ),
            id=internal,
            priority=options.priority,
            backends=tuple(request.backends),
            max_tokens=options.max_tokens,
            single_line=options.single_line,
        )
        seq = 0

        def on_chunk(piece: Streamed) -> None:
            nonlocal seq
            restart = True if piece.restart else None  # another backend took over
            reply(Chunk(id=request_id, seq=seq, text=piece.chunk, replace=restart))
            seq += 1

        current = asyncio.current_task()
        assert current is not None
        self._running[internal] = current
        try:
            done = await self.completer.complete(completion, on_chunk=on_chunk)
        except AnyfillError as error:
            reply(Final.failed(request_id, error_json(error, with_text=self.with_text)))
            return
        except Exception as error:  # a bug must answer the client, not stop the daemon
            log.exception("request %s failed", request_id)
            said = published(Told.of(error, named=True), with_text=self.with_text)
            reply(Final.failure(request_id, "internal", said))
            return
        finally:
            self._running.pop(internal, None)
        reply(
            Final(
                id=request_id,
                ok=True,
                middle=done.middle,
                backend=done.backend,
                ms=round(done.ms, 2),
                first_token_ms=done.first_token_ms,
                usage=UsageInfo.of(done.usage),
            )
        )

    def _insert(self, request: NodeRequest, request_id: str) -> Final:
        """Type at the caret, only for a request signed with this node's insert key: the
        broker does not say who published a message, and one that also lets anonymous
        clients in would let anyone type here."""
        settings = self.in_force  # switched off: refused at once
        if not settings.mqtt.allow_remote_insert:
            return Final.failure(
                request_id,
                "refused",
                "typing into the desktop from the broker is off (mqtt.allow_remote_insert)",
            )
        if not self.spec.authenticated:
            return Final.failure(
                request_id,
                "refused",
                "typing into the desktop needs an authenticated broker connection "
                "(mqtt.username with a password, or a TLS client certificate)",
            )
        key = self._insert_key() if self._insert_key is not None else None
        if not key:
            return Final.failure(
                request_id,
                "refused",
                "typing into the desktop needs the shared insert key "
                f"(anyfill config set-key {settings.mqtt.insert_key or 'mqtt-insert'}, "
                f"or {INSERT_KEY_ENV})",
            )
        now = time.time()
        wrong = insert_signed(key, self.topics.base, request, now)
        if wrong is None and request_id in self._inserted:
            wrong = "this signed insert request was used already (a replay)"
        if wrong is not None:
            log.warning("a remote insert request was refused: %s", wrong)
            return Final.failure(request_id, "refused", wrong)
        self._inserted[request_id] = now
        for seen, at in list(self._inserted.items()):  # a replay outside the skew fails anyway
            if now - at > 2 * INSERT_SKEW_S:
                del self._inserted[seen]
        if self.trigger is None:
            return Final.failure(request_id, "refused", "this process has no desktop to type into")
        self.trigger("complete")
        return Final(id=request_id, ok=True, inserted="requested")


def _internal_id(request_id: str) -> str:
    return f"mqtt-{request_id}"


__all__ = ["NodeBridge"]

"""A desktop's link to a worker pool: one broker connection shared by its requests.

It keeps the connection up (``keep_connected``), subscribes to its own reply topic and to
the pool's presence topic, and routes each reply to the request whose Correlation Data it
carries. Replies for a request nobody waits for any more (finished, fallen back, cancelled)
are dropped: a late or duplicated answer never reaches the user. When the worker serving a
request leaves the pool (its Last Will clears its presence), that request learns it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import aiomqtt

from anyfill.daemon.mqtt.connection import (
    BrokerClient,
    BrokerSpec,
    keep_connected,
    raise_if_cancelled,
)
from anyfill.daemon.mqtt.messages import Chunk, Final, Presence, read_presence, read_reply
from anyfill.daemon.mqtt.protocol import PayloadError
from anyfill.daemon.mqtt.topics import PoolTopics

log = logging.getLogger("anyfill.mqtt.pool")


@dataclass(frozen=True)
class Gone:
    """Put in a request's queue when its worker left the pool (or the link went down)."""


@dataclass(frozen=True)
class Malformed:
    """Put in a request's queue when a reply for it could not be read."""

    reason: str


GONE = Gone()
Incoming = Chunk | Final | Gone | Malformed


class PoolLink:
    def __init__(
        self,
        spec: BrokerSpec,
        topics: PoolTopics,
        on_state: Callable[[bool, str], None] | None = None,
    ) -> None:
        client_id = spec.client_id or f"anyfill-desk-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.spec = BrokerSpec(**{**spec.__dict__, "client_id": client_id})
        self.topics = topics
        self.reply_topic = topics.reply(client_id)
        self.pending: dict[str, asyncio.Queue[Incoming]] = {}
        self.served_by: dict[str, str] = {}
        self.workers: dict[str, Presence] = {}
        self.late_replies = 0
        """Replies that came for a request nobody waits for any more (dropped)."""
        self.unreadable = 0
        """Messages that could not be read (logged and dropped)."""
        self.connected = asyncio.Event()
        self.reason = "not connected yet"
        self.client: BrokerClient | None = None
        self._on_state = on_state
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self.client = BrokerClient(self.spec)
            self._task = asyncio.get_running_loop().create_task(
                keep_connected(self.client, self._session, self._state), name="mqtt-pool-link"
            )

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _state(self, up: bool, reason: str) -> None:
        if up:
            self.reason = ""
        else:
            self.connected.clear()
            self.reason = reason
            self.workers.clear()
            for queue in self.pending.values():
                queue.put_nowait(GONE)  # their replies would go to a session that ended
        if self._on_state is not None:
            self._on_state(up, reason)

    async def _session(self, client: BrokerClient) -> None:
        await client.subscribe(self.reply_topic, qos=1)
        await client.subscribe(self.topics.workers, qos=1)
        raise_if_cancelled()
        self.connected.set()
        async for message in client.messages:
            topic = message.topic.value
            payload = message.payload if isinstance(message.payload, bytes) else b""
            try:
                if topic == self.reply_topic:
                    self._reply(message, payload)
                elif message.topic.matches(self.topics.workers):
                    self._presence(topic.rsplit("/", 1)[-1], payload)
            except Exception:  # one message costs a log line, never the link
                self.unreadable += 1
                log.exception("pool %s: a message on %r was dropped", self.topics.pool, topic)

    def _reply(self, message: aiomqtt.Message, payload: bytes) -> None:
        correlation = getattr(message.properties, "CorrelationData", None)
        request_id: str | None = None
        if isinstance(correlation, bytes):
            with contextlib.suppress(UnicodeDecodeError):
                request_id = correlation.decode("ascii")  # ours are hex: anything else is not
        reply: Incoming
        try:
            read = read_reply(payload)
        except PayloadError as error:
            self.unreadable += 1
            log.warning("pool %s: an unreadable reply was dropped: %s", self.topics.pool, error)
            reply = Malformed(str(error))
        else:
            reply = read
            if request_id is None and correlation is None:
                request_id = read.id
        queue = self.pending.get(request_id) if request_id is not None else None
        if request_id is None or queue is None:
            self.late_replies += 1  # finished, given up or never ours: never answered twice
            return
        worker = getattr(reply, "worker", None)
        if isinstance(worker, str) and request_id not in self.served_by:
            self.served_by[request_id] = worker
        queue.put_nowait(reply)

    def _presence(self, worker: str, payload: bytes) -> None:
        info = read_presence(payload)
        if info is not None:
            self.workers[worker] = info
            return
        self.workers.pop(worker, None)
        for request_id, serving in list(self.served_by.items()):
            queue = self.pending.get(request_id)
            if serving == worker and queue is not None:
                queue.put_nowait(GONE)

    def open(self, request_id: str) -> asyncio.Queue[Incoming]:
        queue: asyncio.Queue[Incoming] = asyncio.Queue()
        self.pending[request_id] = queue
        return queue

    def close(self, request_id: str) -> None:
        self.pending.pop(request_id, None)
        self.served_by.pop(request_id, None)


__all__ = ["GONE", "Gone", "Incoming", "Malformed", "PoolLink"]

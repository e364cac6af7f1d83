"""``anyfill worker``: serve a pool's FIM requests from a broker with this host's backends.

The worker runs the same engine and scheduler as the desktop (limits, cooldowns, fallback
along its own chain) and subscribes to ``$share/<pool>/<prefix>/fim/<pool>/request``: the
broker hands each request to one worker of the pool. With ``--batch-window-ms``, prompts
arriving within that window travel in one HTTP request to a server that takes prompt
lists; without it, answers stream chunk by chunk.

Per request: a duplicate (QoS 1 may deliver twice) is ignored; one whose deadline (the
Message Expiry the broker forwards, and the ``deadline_ms`` it was sent with) has passed
is dropped unanswered, as is one still queued at its deadline; the answer streams to the
request's Response Topic with its Correlation Data: raw chunks, then one final message
with the plan and usage, or the error. A cancel on ``<prefix>/fim/<pool>/cancel`` stops
the request and closes the upstream HTTP stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import aiomqtt

from anyfill.config.model import Settings
from anyfill.daemon.backends.base import Backend, FimPrompt, Plan, Usage
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import CompletionRequest, Finished, Planned, Text
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import AnyfillError, RequestDropped
from anyfill.daemon.mqtt.connection import (
    BrokerClient,
    BrokerSpec,
    keep_connected,
    raise_if_cancelled,
)
from anyfill.daemon.mqtt.protocol import (
    CancelRequest,
    PayloadError,
    PoolRequest,
    dumps,
    error_json,
    parse,
    plan_json,
    usage_json,
)
from anyfill.daemon.mqtt.topics import PoolTopics
from anyfill.daemon.scheduler import Scheduler
from anyfill.daemon.scheduler.limiter import WINDOW_S
from anyfill.daemon.worker.share import PoolShare

log = logging.getLogger("anyfill.worker")

ALL_PRIORITIES = frozenset({"interactive", "prefetch", "batch"})
_SEEN_MAX = 20_000


class Worker:
    def __init__(
        self,
        settings: Settings,
        spec: BrokerSpec,
        pool: str,
        *,
        worker_id: str,
        prefix: str = "anyfill",
        limit_window_s: float = WINDOW_S,
        batch_window_s: float = 0.0,
        bus: EventBus | None = None,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.pool = pool
        self.worker_id = worker_id
        self.topics = PoolTopics(prefix, pool)
        self.limit_window_s = limit_window_s
        self.batch_window_s = batch_window_s
        self.bus = bus
        self.scheduler: Scheduler | None = None
        self.share: PoolShare | None = None
        self.connected = asyncio.Event()
        self.serving = asyncio.Event()
        """Set once subscribed to the pool's requests (after the join delay)."""
        self.answered = 0
        self.dropped = 0
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: BrokerClient | None = None

    def _make_scheduler(self, backends: Mapping[str, Backend], settings: Settings) -> Scheduler:
        self.scheduler = Scheduler(
            list(backends.values()),
            settings.routing,
            bus=self.bus,
            batch_window_s=self.batch_window_s,
            # With a window, every prompt arriving within it shares one HTTP request (for a
            # server that takes prompt lists); without one, answers stream chunk by chunk.
            batch_priorities=ALL_PRIORITIES if self.batch_window_s > 0 else frozenset(),
            limit_window_s=self.limit_window_s,
        )
        return self.scheduler

    async def run(self, stop: asyncio.Event) -> None:
        engine = Engine(self.settings, self._make_scheduler, bus=self.bus)
        async with engine:
            scheduler = self.scheduler
            assert scheduler is not None
            limited = any(
                b.limits.requests_per_minute or b.limits.tokens_per_minute
                for b in self.settings.backends
                if b.name in engine.backends
            )
            self.share = PoolShare(
                self.worker_id,
                scheduler.share_limits,
                window_s=self.limit_window_s,
                limited=limited,
                clock=scheduler.clock,
            )
            will = aiomqtt.Will(self.topics.worker(self.worker_id), b"", qos=1, retain=True)
            client = BrokerClient(self.spec, will=will)
            self._client = client
            link = asyncio.create_task(
                keep_connected(client, self._session, self._on_state), name="worker-link"
            )
            try:
                await stop.wait()
            finally:
                link.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await link
                for task in list(self._tasks):
                    task.cancel()
                if self._tasks:
                    await asyncio.gather(*self._tasks, return_exceptions=True)
                self.share.close()
                await scheduler.aclose()

    def _on_state(self, up: bool, reason: str) -> None:
        if up:
            self.connected.set()
            log.info("worker %s connected to %s", self.worker_id, self.spec.url)
        else:
            self.connected.clear()
            self.serving.clear()
            log.warning("worker %s: broker unreachable: %s", self.worker_id, reason)

    async def _session(self, client: BrokerClient) -> None:
        assert self.share is not None
        await client.subscribe(self.topics.workers, qos=1)
        await client.subscribe(self.topics.cancel, qos=1)
        presence = {
            "state": "online",
            "worker": self.worker_id,
            "since": time.time(),
            "backends": list(self.settings.routing.default),
        }
        await client.publish(
            self.topics.worker(self.worker_id), dumps(presence), qos=1, retain=True
        )
        raise_if_cancelled()
        joined = asyncio.create_task(self._join(client), name="worker-join")
        try:
            async for message in client.messages:
                self._route(client, message)
        finally:
            joined.cancel()
            # Our requests' replies cannot go out on this connection any more; the
            # desktops time out and fall back.
            for task in list(self._tasks):
                task.cancel()
            if self._client is client:
                with contextlib.suppress(aiomqtt.MqttError):
                    client.send(self.topics.worker(self.worker_id), b"", qos=1, retain=True)

    async def _join(self, client: BrokerClient) -> None:
        assert self.share is not None
        await asyncio.sleep(0.2)  # the retained presence of the others arrives first
        delay = self.share.join_delay(len(self.share.members) > 1)
        if delay:
            log.info("joining pool %s in %.0f s (one limit window)", self.pool, delay)
            await asyncio.sleep(delay)
        await client.subscribe(self.topics.shared_request, qos=1)
        raise_if_cancelled()
        self.serving.set()
        log.info("worker %s serves pool %s", self.worker_id, self.pool)

    def _route(self, client: BrokerClient, message: aiomqtt.Message) -> None:
        assert self.share is not None
        payload = message.payload if isinstance(message.payload, bytes) else b""
        topic = message.topic
        if topic.matches(self.topics.workers):
            worker = topic.value.rsplit("/", 1)[-1]
            online = False
            with contextlib.suppress(ValueError):
                data = json.loads(payload) if payload else None
                online = isinstance(data, dict) and data.get("state") == "online"
            if online:
                self.share.online(worker)
            else:
                self.share.offline(worker)
        elif topic.value == self.topics.cancel:
            try:
                cancel = parse(CancelRequest, payload)
            except PayloadError:
                return
            if self.scheduler is not None:
                self.scheduler.cancel(cancel.id)
        elif topic.value == self.topics.request:
            task = asyncio.create_task(self._serve(client, message, payload))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(  # noqa: PLR0915 - one request's life reads best in one place
        self, client: BrokerClient, message: aiomqtt.Message, payload: bytes
    ) -> None:
        properties = message.properties
        reply_to = getattr(properties, "ResponseTopic", None)
        correlation = getattr(properties, "CorrelationData", None)
        if not reply_to:
            log.warning("pool request without a Response Topic ignored")
            return

        def reply(body: dict[str, Any]) -> None:
            from anyfill.daemon.mqtt.connection import publish_properties

            body["worker"] = self.worker_id
            with contextlib.suppress(aiomqtt.MqttError):
                client.send(
                    reply_to,
                    dumps(body),
                    qos=1,
                    properties=publish_properties(correlation=correlation),
                )

        try:
            request = parse(PoolRequest, payload)
        except PayloadError as error:
            reply(
                {
                    "id": error.request_id,
                    "type": "final",
                    "ok": False,
                    "error": {"kind": "bad_request", "message": str(error)},
                }
            )
            return
        if request.id in self._seen:
            return  # delivered twice (QoS 1): answered once
        self._seen[request.id] = None
        if len(self._seen) > _SEEN_MAX:
            self._seen.popitem(last=False)
        left = math.inf
        expiry = getattr(properties, "MessageExpiryInterval", None)
        if isinstance(expiry, int):
            left = float(expiry)
        if request.deadline_ms is not None:
            left = min(left, request.deadline_ms / 1000)
        if left <= 0:
            self.dropped += 1
            return
        deadline = None if math.isinf(left) else time.monotonic() + left
        completion = CompletionRequest(
            context=Context(
                request.prefix, request.suffix, app=f"pool:{request.id}", method="mqtt"
            ),
            id=request.id,
            priority=request.priority,
            deadline=deadline,
        )
        prompt = FimPrompt(
            prefix=request.prefix,
            suffix=request.suffix,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            stop=tuple(request.stop),
            single_line=request.single_line,
            language=request.language,
            filename=request.filename,
            extra=tuple(request.extra),
            request_id=request.id,
        )
        assert self.scheduler is not None
        plan: Plan | None = None
        plan_sent = False
        usage = Usage()
        try:
            events = self.scheduler.dispatch(completion, prompt)
            async with contextlib.aclosing(events) as stream:  # type: ignore[type-var]
                async for event in stream:
                    if isinstance(event, Planned):
                        plan = event.plan
                    elif isinstance(event, Text):
                        chunk: dict[str, Any] = {"id": request.id, "type": "chunk"}
                        chunk["text"] = event.chunk
                        if plan is not None and not plan_sent:
                            chunk["plan"] = plan_json(plan)
                            plan_sent = True
                        reply(chunk)
                    elif isinstance(event, Finished):
                        usage = event.usage
        except RequestDropped as dropped:
            self.dropped += 1
            log.debug("request %s dropped: %s", request.id, dropped.reason)
            return  # cancelled by the desktop or past its deadline: nobody waits
        except AnyfillError as error:
            # The server's words (captured text) only as this worker's mqtt_text allows.
            failed = error_json(
                error, with_text=self.settings.privacy.mqtt_text, for_worker_link=True
            )
            reply({"id": request.id, "type": "final", "ok": False, "error": failed})
            self.answered += 1
            return
        final: dict[str, Any] = {"id": request.id, "type": "final", "ok": True}
        final["usage"] = usage_json(usage)
        if plan is not None:
            final["plan"] = plan_json(plan)
        reply(final)
        self.answered += 1


__all__ = ["Worker"]

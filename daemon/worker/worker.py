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

Presence: the worker's retained announcement carries a Message Expiry of
``PRESENCE_TTL_S`` and is published again every ``HEARTBEAT_S``; a presence without an
expiry, or with a longer one, is not counted (a retained message that nobody refreshes,
as a thousand fakes published once would be, must not shrink the real workers' share),
and a member whose presence was not refreshed in time counts no more. Every message is
read with bounds; a bad one costs a log line, never the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Mapping

import aiomqtt

from anyfill.config.model import Settings
from anyfill.daemon.backends.base import Backend, Plan, Usage
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
from anyfill.daemon.mqtt.messages import Chunk, Final, PlanInfo, Presence, UsageInfo, read_presence
from anyfill.daemon.mqtt.protocol import (
    CancelRequest,
    PayloadError,
    PoolRequest,
    error_json,
    parse,
)
from anyfill.daemon.mqtt.topics import PoolTopics
from anyfill.daemon.scheduler import Scheduler
from anyfill.daemon.scheduler.limiter import WINDOW_S
from anyfill.daemon.worker.share import PoolShare

log = logging.getLogger("anyfill.worker")

ALL_PRIORITIES = frozenset({"interactive", "prefetch", "batch"})
_SEEN_MAX = 20_000
PRESENCE_TTL_S = 60
"""A presence's Message Expiry: the broker forgets a worker that stopped refreshing it."""
HEARTBEAT_S = 20.0
"""How often a worker publishes its presence again (three chances within its expiry)."""


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
        self._fresh_until: dict[str, float] = {}
        """Other members: until when their last presence counts (``time.monotonic()``)."""
        self.ignored_presences = 0
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
        await self._announce(client, wait=True)
        raise_if_cancelled()
        joined = asyncio.create_task(self._join(client), name="worker-join")
        beating = asyncio.create_task(self._heartbeat(client), name="worker-heartbeat")
        try:
            async for message in client.messages:
                try:
                    self._route(client, message)
                except Exception:  # one message costs a log line, never the link
                    log.exception("a message on %r was dropped", message.topic.value)
        finally:
            joined.cancel()
            beating.cancel()
            # Our requests' replies cannot go out on this connection any more; the
            # desktops time out and fall back.
            for task in list(self._tasks):
                task.cancel()
            if self._client is client:
                with contextlib.suppress(aiomqtt.MqttError):
                    client.send(self.topics.worker(self.worker_id), b"", qos=1, retain=True)

    async def _announce(self, client: BrokerClient, *, wait: bool = False) -> None:
        from anyfill.daemon.mqtt.connection import publish_properties

        presence = Presence(
            state="online",
            worker=self.worker_id,
            since=time.time(),
            backends=list(self.settings.routing.default),
        ).to_bytes()
        topic = self.topics.worker(self.worker_id)
        properties = publish_properties(expiry_s=PRESENCE_TTL_S) if self.spec.v5 else None
        if wait:
            await client.publish(topic, presence, qos=1, retain=True, properties=properties)
        else:
            client.send(topic, presence, qos=1, retain=True, properties=properties)

    async def _heartbeat(self, client: BrokerClient) -> None:
        """Refresh our presence; forget members whose presence nobody refreshed."""
        assert self.share is not None
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(aiomqtt.MqttError):
                await self._announce(client)
            now = time.monotonic()
            for worker, until in list(self._fresh_until.items()):
                if until < now:
                    del self._fresh_until[worker]
                    log.info("worker %s did not refresh its presence: not counted", worker)
                    self.share.offline(worker)

    def _presence(self, worker: str, message: aiomqtt.Message, payload: bytes) -> None:
        assert self.share is not None
        if worker == self.worker_id:
            return
        presence = read_presence(payload)
        if presence is None:
            self._fresh_until.pop(worker, None)
            self.share.offline(worker)
            return
        expiry = getattr(message.properties, "MessageExpiryInterval", None)
        if not isinstance(expiry, int) or not 0 < expiry <= PRESENCE_TTL_S:
            self.ignored_presences += 1
            if self.ignored_presences in (1, 10, 100, 1000) or self.ignored_presences % 10000 == 0:
                log.warning(
                    "pool %s: %d presence(s) without a short expiry not counted (an old "
                    "anyfill, or not a worker), latest %r",
                    self.pool,
                    self.ignored_presences,
                    worker[:64],
                )
            return
        self._fresh_until[worker] = time.monotonic() + expiry
        self.share.online(worker)

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
            self._presence(topic.value.rsplit("/", 1)[-1], message, payload)
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
            task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            log.error("a pool request failed: %s", type(error).__name__, exc_info=error)

    async def _serve(  # noqa: PLR0915 - one request's life reads best in one place
        self, client: BrokerClient, message: aiomqtt.Message, payload: bytes
    ) -> None:
        from anyfill.daemon.mqtt.connection import publish_properties
        from anyfill.daemon.mqtt.protocol import topic_problem

        properties = message.properties
        reply_to = getattr(properties, "ResponseTopic", None)
        correlation = getattr(properties, "CorrelationData", None)
        if not isinstance(reply_to, str) or topic_problem(reply_to) is not None:
            log.warning("pool request without a usable Response Topic ignored")
            return
        sent_with = publish_properties(
            correlation=correlation if isinstance(correlation, bytes) else None
        )

        def reply(body: Chunk | Final) -> None:
            with contextlib.suppress(aiomqtt.MqttError, ValueError):
                client.send(reply_to, body.to_bytes(), qos=1, properties=sent_with)

        me = self.worker_id
        try:
            request = parse(PoolRequest, payload)
        except PayloadError as error:
            reply(
                Final.failure(error.request_id, "bad_request", str(error)).model_copy(
                    update={"worker": me}
                )
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
        prompt = request.prompt()
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
                        first_plan = None
                        if plan is not None and not plan_sent:
                            first_plan, plan_sent = PlanInfo.of(plan), True
                        reply(Chunk(id=request.id, text=event.chunk, plan=first_plan, worker=me))
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
            reply(Final.failed(request.id, failed).model_copy(update={"worker": me}))
            self.answered += 1
            return
        reply(
            Final(
                id=request.id,
                ok=True,
                usage=UsageInfo.of(usage),
                plan=PlanInfo.of(plan) if plan is not None else None,
                worker=me,
            )
        )
        self.answered += 1


__all__ = ["Worker"]

"""Backend type ``mqtt``: ask a pool of ``anyfill worker`` processes through a broker.

The request goes to ``<prefix>/fim/<pool>/request`` at QoS 1 with the MQTT 5 Response
Topic, Correlation Data and a Message Expiry equal to the backend's ``first_token_s``: a
request nobody picked up by then is dropped by the broker, and a worker that gets it late
drops it too. The desktop waits at most that long for each message of the answer, so a
worker that died with the request costs at most that deadline, after which the scheduler
falls back to the next backend. A PUBACK with reason "no matching subscribers" (no worker
online) falls back at once. Closing the stream early sends a cancel to the pool.

The worker answers with raw text chunks and the plan its backend used; the desktop's
engine cleans the answer as for any other backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx

from anyfill.config.model import BackendConfig
from anyfill.daemon.backends.base import Backend, Capabilities, FimPrompt, StreamObserver
from anyfill.daemon.errors import BackendTimeout, BackendUnavailable, ProtocolError

_NO_WORKER = 0x10


class MqttPoolBackend(Backend):
    type_name = "mqtt"
    capabilities = Capabilities(native_suffix=True, streaming=True)

    def __init__(
        self, config: BackendConfig, client: httpx.AsyncClient, api_key: str | None = None
    ) -> None:
        super().__init__(config, client, api_key)
        from anyfill.daemon.mqtt.connection import BrokerSpec, parse_broker_url
        from anyfill.daemon.mqtt.pool_link import PoolLink
        from anyfill.daemon.mqtt.topics import PoolTopics

        host, port, tls, user = parse_broker_url(config.url)
        options = config.options
        spec = BrokerSpec(
            host=host,
            port=port,
            tls=tls,
            username=user,
            password=api_key or "",
            tls_ca=str(options.get("tls_ca", "")),
            tls_cert=str(options.get("tls_cert", "")),
            tls_key=str(options.get("tls_key", "")),
        )
        prefix = str(options.get("topic_prefix", "anyfill"))
        self.topics = PoolTopics(prefix, config.pool)
        self.link = PoolLink(spec, self.topics)

    async def _connected(self) -> Any:
        self.link.start()
        try:
            await asyncio.wait_for(self.link.connected.wait(), self.config.timeouts.connect_s)
        except TimeoutError:
            raise BackendUnavailable(
                self.name, f"cannot reach the broker of '{self.name}': {self.link.reason}"
            ) from None
        assert self.link.client is not None
        return self.link.client

    def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        return self._stream(prompt, observer)

    async def _stream(  # noqa: PLR0915 - one request's life reads best in one place
        self, prompt: FimPrompt, observer: StreamObserver | None
    ) -> AsyncIterator[str]:
        import aiomqtt

        from anyfill.daemon.mqtt.connection import publish_properties
        from anyfill.daemon.mqtt.messages import Chunk, Final
        from anyfill.daemon.mqtt.pool_link import Gone, Malformed
        from anyfill.daemon.mqtt.protocol import CancelRequest, PoolRequest, error_from_json

        client = await self._connected()
        link = self.link
        deadline_s = self.config.timeouts.first_token_s
        request_id = uuid.uuid4().hex
        body = PoolRequest.of(request_id, prompt, max(1, int(deadline_s * 1000))).to_bytes()
        properties = publish_properties(
            response_topic=link.reply_topic,
            correlation=request_id.encode(),
            expiry_s=math.ceil(deadline_s),
        )
        queue = link.open(request_id)
        finished = False
        try:
            try:
                code = await client.publish_acked(
                    self.topics.request, body, properties=properties, wait_s=deadline_s
                )
            except aiomqtt.MqttError as exc:
                raise BackendUnavailable(self.name, f"'{self.name}': {exc}") from exc
            if code == _NO_WORKER:
                raise BackendUnavailable(
                    self.name, f"no worker is serving pool '{self.config.pool}'"
                )
            if code >= 0x80:
                raise BackendUnavailable(
                    self.name, f"the broker refused the request for '{self.name}' (code {code})"
                )
            planned = False
            while True:
                started = time.monotonic()
                try:
                    message = await asyncio.wait_for(queue.get(), deadline_s)
                except TimeoutError:
                    waited = time.monotonic() - started
                    raise BackendTimeout(
                        self.name,
                        f"no answer from pool '{self.config.pool}' within {waited:.1f} s",
                    ) from None
                if isinstance(message, Gone):
                    raise BackendUnavailable(
                        self.name,
                        f"the worker serving '{self.name}' left mid-request "
                        f"({link.reason or 'gone'})",
                    )
                if isinstance(message, Malformed):
                    raise ProtocolError(self.name, f"'{self.name}': {message.reason}")
                if message.plan is not None and not planned and observer is not None:
                    observer.on_plan(message.plan.plan())
                    planned = True
                if isinstance(message, Chunk):
                    if message.text:
                        yield message.text
                    continue
                final: Final = message
                finished = True
                if not final.ok:
                    raise error_from_json(self.name, final.error)
                if observer is not None and final.usage is not None:
                    observer.on_usage(final.usage.usage())
                return
        finally:
            link.close(request_id)
            if not finished and link.connected.is_set():
                # The user no longer wants it (superseded, cancelled, timed out): stop the
                # worker's upstream stream too. Best effort: the reply is ignored anyway.
                with contextlib.suppress(aiomqtt.MqttError):
                    cancel = CancelRequest(id=request_id).model_dump_json().encode()
                    client.send(self.topics.cancel, cancel, qos=1)

    async def health(self) -> None:
        await self._connected()
        await asyncio.sleep(0.2)  # retained presence arrives right after subscribing
        if not self.link.workers:
            raise BackendUnavailable(self.name, f"no worker is online in pool '{self.config.pool}'")

    async def aclose(self) -> None:
        await self.link.aclose()


__all__ = ["MqttPoolBackend"]

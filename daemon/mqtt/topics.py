"""Topic names, in one place (``prefix`` is ``mqtt.prefix``, ``anyfill`` by default)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeTopics:
    """The topics of one daemon or worker: ``<prefix>/<node>/...``."""

    prefix: str
    node: str

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.node}"

    @property
    def status(self) -> str:
        """Retained JSON; the Last Will sets it to ``offline``."""
        return f"{self.base}/status"

    @property
    def events(self) -> str:
        return f"{self.base}/events"

    @property
    def request(self) -> str:
        return f"{self.base}/request"

    @property
    def cancel(self) -> str:
        return f"{self.base}/cancel"

    @property
    def response(self) -> str:
        """Where replies go when the request names no Response Topic (MQTT 3.1.1)."""
        return f"{self.base}/response"


@dataclass(frozen=True)
class PoolTopics:
    """The topics of a worker pool: ``<prefix>/fim/<pool>/...``."""

    prefix: str
    pool: str

    @property
    def base(self) -> str:
        return f"{self.prefix}/fim/{self.pool}"

    @property
    def request(self) -> str:
        return f"{self.base}/request"

    @property
    def shared_request(self) -> str:
        """The MQTT 5 shared subscription: the broker hands each request to one worker."""
        return f"$share/{self.pool}/{self.request}"

    @property
    def cancel(self) -> str:
        return f"{self.base}/cancel"

    def worker(self, worker_id: str) -> str:
        """A worker's retained presence (its Last Will clears it)."""
        return f"{self.base}/workers/{worker_id}"

    @property
    def workers(self) -> str:
        return f"{self.base}/workers/+"

    def reply(self, client_id: str) -> str:
        return f"{self.base}/reply/{client_id}"


__all__ = ["NodeTopics", "PoolTopics"]

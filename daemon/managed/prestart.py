"""Starting managed servers with the daemon, unless the user's own server answers first."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from anyfill.config.model import Settings
from anyfill.daemon.backends.base import Backend
from anyfill.daemon.errors import AnyfillError
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend

__all__ = ["answers", "start_managed_servers"]

log = logging.getLogger("anyfill.managed")


async def answers(backend: Backend) -> bool:
    try:
        async with asyncio.timeout(backend.config.timeouts.connect_s + 2):
            await backend.health()
    except (AnyfillError, TimeoutError):
        return False
    return True


async def start_managed_servers(backends: Mapping[str, Backend], settings: Settings) -> None:
    """Start each ``start = "daemon"`` managed server whose earlier backends in the chain
    do not answer: a user who runs a server keeps it, one who runs none gets ours at once
    (a later request still starts it if the user's server goes away)."""
    chain = [name for name in settings.routing.default if name in backends]
    for index, name in enumerate(chain):
        backend = backends[name]
        if not isinstance(backend, ManagedLlamaCppBackend):
            continue
        if backend.config.server.start != "daemon":
            continue
        before = [
            backends[n]
            for n in chain[:index]
            if not isinstance(backends[n], ManagedLlamaCppBackend)
        ]
        answering = await asyncio.gather(*(answers(b) for b in before))
        if any(answering):
            first = next(b.name for b, ok in zip(before, answering, strict=True) if ok)
            log.info("not starting '%s': '%s' answers before it in the chain", name, first)
            continue
        await backend.start()


def managed_in(backends: Mapping[str, Backend]) -> list[ManagedLlamaCppBackend]:
    return [b for b in backends.values() if isinstance(b, ManagedLlamaCppBackend)]

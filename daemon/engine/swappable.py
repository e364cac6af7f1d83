"""The completer the pipeline, the preview and MQTT hold while settings change.

New settings (backends, routing, completion) build a new engine (backends and scheduler);
requests already running finish on the engine they started on, which is closed once the
last of them is done; the next request uses the new one. ``start_soon`` builds the first
engine in the background so the hotkeys go live before the HTTP stack is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from anyfill.config.model import Settings
from anyfill.daemon.backends.leases import Leases
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import Completer, Completion, CompletionRequest, OnChunk

log = logging.getLogger("anyfill.reload")


@dataclass
class _Slot:
    completer: Completer
    manager: Any
    running: int = 0
    retired: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)


CompleterFactory = Callable[[Settings, EventBus, Leases], Any]
"""Builds an engine for the settings; what its backends run is leased from the leases."""


class SwappableCompleter:
    """A :class:`Completer` whose engine can be replaced while requests run."""

    def __init__(self, factory: CompleterFactory, bus: EventBus) -> None:
        self._factory = factory
        self._bus = bus
        self.leases = Leases()
        """Shared by every engine this completer builds: an unchanged managed server is not
        restarted by a change of other settings."""
        self._current: _Slot | None = None
        self._owners: dict[str, _Slot] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._starting: asyncio.Task[None] | None = None

    async def start(self, settings: Settings) -> None:
        self._current = await self._enter(settings)

    def start_soon(
        self, settings: Settings, prepare: Callable[[], None] | None = None
    ) -> asyncio.Task[None]:
        """Build the engine in the background, so the hotkeys go live without waiting for
        the HTTP stack and the keyring; a request that comes first waits for it.

        ``prepare`` runs in a thread first (imports, the keyring's backend), keeping the
        loop free for the first press's capture while it runs.
        """

        async def build() -> None:
            if prepare is not None:
                await asyncio.to_thread(prepare)
            await self.start(settings)

        self._starting = asyncio.create_task(build(), name="anyfill-build-backends")
        return self._starting

    async def _started(self) -> None:
        """Wait for a background start; its failure is raised to whoever needs the engine."""
        starting = self._starting
        if starting is not None and self._current is None:
            # Shielded: a cancelled request must not cancel the build for the next one.
            await asyncio.shield(starting)

    async def _enter(self, settings: Settings) -> _Slot:
        manager = self._factory(settings, self._bus, self.leases)
        entered = await manager.__aenter__()
        return _Slot(entered if entered is not None else manager, manager)

    async def replace(self, settings: Settings) -> None:
        """Build the new engine first (a failure leaves the old one serving), then swap."""
        await self._started()
        new = await self._enter(settings)
        old, self._current = self._current, new
        if old is not None:
            old.retired = True
            if old.running == 0:
                await self._close(old)

    @property
    def current(self) -> Completer | None:
        """The engine new requests go to."""
        return self._current.completer if self._current is not None else None

    @property
    def running(self) -> int:
        return len(self._owners)

    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: OnChunk | None = None,
    ) -> Completion:
        await self._started()
        slot = self._current
        if slot is None:
            raise RuntimeError("the completer is not started")
        slot.running += 1
        self._owners[request.id] = slot
        try:
            if on_chunk is None:  # a completer may take no chunks (the desktop's fakes)
                return await slot.completer.complete(request, on_text)
            return await slot.completer.complete(request, on_text, on_chunk=on_chunk)
        finally:
            self._owners.pop(request.id, None)
            slot.running -= 1
            if slot.retired and slot.running == 0:
                task = asyncio.create_task(self._close(slot), name="anyfill-retire-engine")
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def cancel(self, request_id: str) -> bool:
        slot = self._owners.get(request_id) or self._current
        return await slot.completer.cancel(request_id) if slot is not None else False

    async def _close(self, slot: _Slot) -> None:
        if slot.closed.is_set():
            return
        slot.closed.set()
        try:
            await slot.manager.__aexit__(None, None, None)
        except Exception:  # closing sockets of a retired engine must not disturb the new one
            log.exception("closing the previous backends failed")
        log.debug("the previous backends are closed")

    async def aclose(self) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._starting  # closed below if it got as far as an engine
        if self._current is not None:
            await self._close(self._current)
            self._current = None
        for slot in {id(s): s for s in self._owners.values()}.values():
            await self._close(slot)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def __aenter__(self) -> SwappableCompleter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

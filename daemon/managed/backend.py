"""Backend type ``llamacpp-managed``: the ``llamacpp`` backend on a server anyfill runs.

Everything about asking (``/infill``, templates, batches, cancellation) is
:class:`~anyfill.daemon.backends.llamacpp.LlamaCppBackend`'s; this class only makes sure
the supervised server is up before each request and sends the request to the port it
listens on now.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Self

import httpx

from anyfill.config.model import BackendConfig, ModelsConfig
from anyfill.daemon.backends.base import BackendContext, BatchResult, FimPrompt, StreamObserver
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.backends.leases import Leases
from anyfill.daemon.backends.llamacpp import LlamaCppBackend
from anyfill.daemon.bus import EventBus
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.managed.supervisor import LlamaServerSupervisor
from anyfill.daemon.models.download import download_in_background
from anyfill.daemon.models.store import resolve_model

__all__ = ["ManagedLlamaCppBackend", "server_key"]


def server_key(config: BackendConfig, models: ModelsConfig | None) -> str:
    """What makes a managed server what it is: its name (the events', the logs'), its
    port, its model, its ``[backends.server]`` table and where models are found. A change
    of anything else (max_tokens, timeouts, another backend, a hotkey) keeps it running."""
    import json

    models = models or ModelsConfig()
    return json.dumps(
        [
            config.name,
            config.url,  # a fixed port, when one is written
            config.model,
            config.server.model_dump(mode="json"),
            models.model_dump(mode="json"),
        ],
        sort_keys=True,
    )


class ManagedLlamaCppBackend(LlamaCppBackend):
    type_name = "llamacpp-managed"

    def __init__(
        self,
        config: BackendConfig,
        client: httpx.AsyncClient,
        api_key: str | None = None,
        *,
        bus: EventBus | None = None,
        models: ModelsConfig | None = None,
        leases: Leases | None = None,
        **supervisor_options: Any,
    ) -> None:
        super().__init__(config, client, api_key)

        def make() -> LlamaServerSupervisor:
            return LlamaServerSupervisor(config, models, bus=bus, **supervisor_options)

        self._leases = leases
        self._lease = server_key(config, models)
        if leases is None:
            self.supervisor = make()
        else:  # the server an engine before this one runs, when nothing of it changed
            self.supervisor = leases.lease(self._lease, make, LlamaServerSupervisor.aclose)
        self.api_key = self.supervisor.api_key  # sent as a Bearer token by the llamacpp code

    @classmethod
    def create(
        cls,
        config: BackendConfig,
        client: httpx.AsyncClient,
        api_key: str | None = None,
        context: BackendContext | None = None,
    ) -> Self:
        context = context or BackendContext()
        return cls(
            config, client, api_key, bus=context.bus, models=context.models, leases=context.leases
        )

    def url(self, path: str) -> str:
        return f"{self.supervisor.url}{path}"

    async def _ready(self) -> None:
        await self.supervisor.ready_url(self.config.server.start_timeout_s)

    async def start(self) -> None:
        """Start the server now instead of at the first request (the daemon does)."""
        self.supervisor.start_soon()

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        await self._ready()
        async with closing_stream(super().stream(prompt, observer)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def complete_batch(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        await self._ready()
        return await super().complete_batch(prompts, observer)

    async def health(self) -> None:
        await self._ready()
        await super().health()

    async def download_model(self) -> Path:
        """Download this backend's catalogue model (once the user agreed: the tray asks with
        the size and folder of the ``missing_model`` event), reporting ``ModelDownload``
        events on the bus, then start the server. Raises DownloadError or ConfigError."""
        supervisor = self.supervisor
        model = resolve_model(self.config.model, supervisor.models)
        if model.catalog is None:
            raise ConfigError(
                f"backend '{self.name}' runs {model.path}, a file anyfill cannot download",
                key="model",
            )
        bus = supervisor.bus
        path = await download_in_background(
            model.catalog,
            model.path,
            endpoint=supervisor.models.endpoint or None,
            publish=bus.publish if bus is not None else (lambda event: None),
        )
        supervisor.start_soon()
        return path

    async def aclose(self) -> None:
        if self._leases is None:
            await self.supervisor.aclose()
        else:  # stopped once no engine holds it any more
            await self._leases.release(self._lease)

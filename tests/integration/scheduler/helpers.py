"""Real backends with the real HTTP client, pointed at loopback servers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import httpx

from anyfill.config.model import BackendConfig, Limits, RoutingConfig, Timeouts
from anyfill.daemon.backends.base import Backend, FimPrompt
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.backends.registry import create_backend
from anyfill.daemon.completion import CompletionRequest, DispatchEvent, Text
from anyfill.daemon.context import Context
from anyfill.daemon.scheduler import Scheduler

MODEL = "qwen2.5-coder-1.5b"


def openai_config(name: str, url: str, **kw: object) -> BackendConfig:
    return BackendConfig(name=name, type="openai-completions", url=url, model=MODEL, **kw)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def scheduler_for(
    configs: Sequence[BackendConfig], routing: RoutingConfig | None = None, **kw: object
) -> AsyncIterator[Scheduler]:
    clients: list[httpx.AsyncClient] = []
    backends: list[Backend] = []
    for config in configs:
        client = make_client(config)
        clients.append(client)
        backends.append(create_backend(config, client, None))
    routing = routing or RoutingConfig(default=[c.name for c in configs])
    try:
        async with Scheduler(backends, routing, **kw) as scheduler:  # type: ignore[arg-type]
            yield scheduler
    finally:
        for client in clients:
            await client.aclose()


def request(rid: str, target: str = "editor", **kw: object) -> CompletionRequest:
    return CompletionRequest(
        context=Context(prefix="def f(", suffix="):\n", app=target),
        id=rid,
        **kw,  # type: ignore[arg-type]
    )


def prompt(prefix: str = "def f(") -> FimPrompt:
    return FimPrompt(prefix=prefix, suffix="):\n", max_tokens=32)


async def collect(
    scheduler: Scheduler, req: CompletionRequest, p: FimPrompt | None = None
) -> list[DispatchEvent]:
    return [event async for event in scheduler.dispatch(req, p or prompt())]


def text_of(events: list[DispatchEvent]) -> str:
    return "".join(e.chunk for e in events if isinstance(e, Text))


async def first_text(
    scheduler: Scheduler, req: CompletionRequest
) -> tuple[asyncio.Task[None], asyncio.Event]:
    """Start ``req`` in a task; the event is set once its first text arrived."""
    seen = asyncio.Event()

    async def consume() -> None:
        async for event in scheduler.dispatch(req, prompt()):
            if isinstance(event, Text):
                seen.set()

    return asyncio.create_task(consume()), seen


__all__ = ["Limits", "Timeouts"]

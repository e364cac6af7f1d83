"""Building real backends against loopback servers, and a recording observer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from anyfill.config.model import BackendConfig
from anyfill.daemon.backends.base import Backend, FimPrompt, Plan, Usage
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.backends.registry import create_backend
from tests.servers import (
    Anthropic,
    Gemini,
    LlamaCpp,
    MistralFim,
    Ollama,
    OpenAI,
    Reply,
    Scripted,
)

SEED = FimPrompt(prefix='print("Hel', suffix=")")


@dataclass
class Recorder:
    statuses: list[int] = field(default_factory=list)
    headers: list[Mapping[str, str]] = field(default_factory=list)
    usages: list[Usage] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)

    def on_response(self, status: int, headers: Mapping[str, str]) -> None:
        self.statuses.append(status)
        self.headers.append(dict(headers))

    def on_usage(self, usage: Usage) -> None:
        self.usages.append(usage)

    def on_plan(self, plan: Plan) -> None:
        self.plans.append(plan)


@contextlib.asynccontextmanager
async def backend_for(
    type_name: str, url: str, *, api_key: str | None = None, **config: Any
) -> AsyncIterator[Backend]:
    cfg = BackendConfig(name=f"test-{type_name}", type=type_name, url=url, **config)  # type: ignore[arg-type]
    client = make_client(cfg)
    try:
        yield create_backend(cfg, client, api_key)
    finally:
        await client.aclose()


async def collect(
    backend: Backend, prompt: FimPrompt = SEED, observer: Recorder | None = None
) -> list[str]:
    async with closing_stream(backend.stream(prompt, observer)) as chunks:
        return [chunk async for chunk in chunks]


@dataclass(frozen=True)
class Case:
    """One backend type with the loopback responder that speaks its protocol."""

    type_name: str
    responder: Callable[..., Scripted]
    config: Mapping[str, Any] = field(default_factory=dict)
    api_key: str | None = None
    responder_args: Mapping[str, Any] = field(default_factory=dict)

    def make(self, *replies: Reply, default: Reply | None = None, **extra: Any) -> Scripted:
        return self.responder(*replies, default=default, **{**self.responder_args, **extra})


KEY = "sk-test-0123456789"

CASES = [
    Case("llamacpp", LlamaCpp),
    Case("ollama", Ollama, {"model": "qwen2.5-coder:1.5b-base"}),
    Case(
        "openai-completions",
        OpenAI,
        {"model": "qwen2.5-coder-1.5b", "options": {"native_suffix": False}},
        KEY,
        {"api_key": KEY},
    ),
    Case("mistral-fim", MistralFim, {"model": "codestral-latest"}, KEY, {"api_key": KEY}),
    Case("openai-chat", OpenAI, {"model": "gpt-test"}, KEY, {"api_key": KEY}),
    Case("anthropic", Anthropic, {"model": "claude-test"}, KEY, {"api_key": KEY}),
    Case("gemini", Gemini, {"model": "gemini-test"}, KEY, {"api_key": KEY}),
]
CASE_IDS = [case.type_name for case in CASES]

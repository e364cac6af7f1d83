"""Building real backends against loopback servers, and a recording observer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from anyfill.config.model import BackendConfig
from anyfill.daemon.backends.base import Backend, FimPrompt, Plan, Usage
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.backends.registry import create_backend
from anyfill.daemon.log import setup_logging
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


@contextlib.contextmanager
def text_opted_in() -> Iterator[None]:
    """The user opted in to captured text in messages (privacy.log_text = true)."""
    setup_logging(to_file=False, stderr=False, log_text=True)
    try:
        yield
    finally:
        setup_logging(to_file=False, stderr=False, log_text=False)


def assert_hidden(message: str, server_text: str) -> None:
    """The server's free text is not in ``message``: only its length, and how to see it."""
    assert server_text not in message
    assert f"{len(server_text)} characters, is hidden" in message
    assert "privacy.log_text = true" in message

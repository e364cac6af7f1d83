"""The Engine end to end over real HTTP: context -> backend -> exact middle."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.backends.base import Backend
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.dispatch import SequentialDispatcher
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import (
    AuthError,
    BackendUnavailable,
    ConfigError,
    ModelNotFound,
    NeedsKeyError,
    RequestDropped,
)
from tests.integration.backends.helpers import KEY
from tests.servers import Anthropic, Gemini, LlamaCpp, Ollama, OpenAI, Reply
from tests.servers.fixtures import StartServer

SEED_CONTEXT = Context(prefix='print("Hel', suffix=")")


def settings_for(*backends: BackendConfig, chain: list[str] | None = None) -> Settings:
    names = [b.name for b in backends]
    return Settings(backends=list(backends), routing=RoutingConfig(default=chain or names))


ENV = {"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "GEMINI_API_KEY": KEY}


@pytest.mark.parametrize(
    ("type_name", "responder", "model"),
    [
        ("llamacpp", LlamaCpp, ""),
        ("ollama", Ollama, "qwen2.5-coder:1.5b-base"),
        ("openai-chat", OpenAI, "gpt-test"),
        ("anthropic", Anthropic, "claude-test"),
        ("gemini", Gemini, "gemini-test"),
    ],
)
async def test_seed_example_gives_the_exact_middle(
    loopback: StartServer, type_name: str, responder: type, model: str
) -> None:
    """prefix `print("Hel`, suffix `)`, answer `lo World")` -> `lo World"`.

    The chunks are paced, as a model's tokens are: text that arrives in one read is handed
    on as one piece, so an unpaced answer could come up whole."""
    srv = await loopback(responder(Reply(text='lo World")', chunk_delay_s=0.005)))
    config = BackendConfig(name="b", type=type_name, url=srv.url, model=model)  # type: ignore[arg-type]
    seen: list[str] = []
    async with Engine(settings_for(config), environ=ENV) as engine:
        done = await engine.complete(CompletionRequest(SEED_CONTEXT), on_text=seen.append)
    assert done.middle == 'lo World"'
    assert done.raw == 'lo World")'
    assert done.backend == "b"
    assert seen[-1] == 'lo World")'
    assert len(seen) > 1
    assert done.first_token_ms is not None
    assert done.ms >= done.first_token_ms


async def test_chat_answer_in_its_tag_is_unwrapped(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(default=Reply(text='Sure!\n<fill>lo World")</fill>')))
    config = BackendConfig(name="gpt", type="openai-chat", url=srv.url, model="gpt-test")
    async with Engine(settings_for(config), environ=ENV) as engine:
        done = await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert done.plan.mode == "chat"
    assert done.middle == 'lo World"'


async def test_template_stops_cut_the_answer(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(fim=False, model_path="/m/starcoder2-3b.gguf"))
    srv_reply = Reply(text='lo World")<file_sep>junk that follows')
    srv.responder.push(srv_reply)  # type: ignore[attr-defined]
    config = BackendConfig(name="local", type="llamacpp", url=srv.url)
    async with Engine(settings_for(config)) as engine:
        done = await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert done.middle == 'lo World"'
    assert done.plan.template == "starcoder"
    assert "501" in done.plan.note


async def test_context_is_trimmed_and_single_line_decided(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="x")))
    config = BackendConfig(name="local", type="llamacpp", url=srv.url)
    settings = settings_for(config)
    settings.completion.max_prefix_chars = 50
    settings.completion.max_suffix_chars = 20
    prefix = "".join(f"line {i}\n" for i in range(40)) + "value = f("
    suffix = ")\n" + "".join(f"after {i}\n" for i in range(40))
    async with Engine(settings) as engine:
        await engine.complete(CompletionRequest(Context(prefix=prefix, suffix=suffix)))
    body = srv.requests[0].json()
    assert len(body["input_prefix"]) <= 50
    assert body["input_prefix"].endswith("value = f(")
    assert body["input_prefix"].startswith("line ")  # cut at a line start
    assert len(body["input_suffix"]) <= 20
    assert body["input_suffix"].startswith(")\n")
    assert body["stop"][0] == "\n"  # text follows the caret on its line: single-line


async def test_falls_back_to_the_next_backend_on_a_retryable_error(
    loopback: StartServer, refused_url: str
) -> None:
    srv = await loopback(Ollama())
    down = BackendConfig(name="down", type="llamacpp", url=refused_url)
    up = BackendConfig(name="up", type="ollama", url=srv.url, model="qwen2.5-coder:1.5b-base")
    async with Engine(settings_for(down, up)) as engine:
        done = await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert done.backend == "up"
    assert done.middle == 'lo World"'


async def test_no_fallback_past_a_refused_key(loopback: StartServer) -> None:
    first = await loopback(OpenAI(api_key="other"))
    second = await loopback(Ollama())
    gpt = BackendConfig(name="gpt", type="openai-chat", url=first.url, model="m")
    local = BackendConfig(
        name="local", type="ollama", url=second.url, model="qwen2.5-coder:1.5b-base"
    )
    async with Engine(settings_for(gpt, local), environ=ENV) as engine:
        with pytest.raises(AuthError, match="the API key for backend 'gpt' was refused"):
            await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert second.requests == []


async def test_last_error_when_every_backend_fails(refused_url: str) -> None:
    a = BackendConfig(name="a", type="llamacpp", url=refused_url)
    async with Engine(settings_for(a)) as engine:
        with pytest.raises(BackendUnavailable, match="nothing listens"):
            await engine.complete(CompletionRequest(SEED_CONTEXT))


async def test_missing_key_is_raised_when_the_backend_is_asked(loopback: StartServer) -> None:
    srv = await loopback(Anthropic())
    claude = BackendConfig(name="claude", type="anthropic", url=srv.url)
    async with Engine(settings_for(claude), environ={}) as engine:
        with pytest.raises(NeedsKeyError, match="ANTHROPIC_API_KEY"):
            await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert srv.requests == []


async def test_cancel_stops_the_request_and_closes_the_connection(
    loopback: StartServer,
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="t " * 500, chunk_delay_s=0.01)))
    config = BackendConfig(name="local", type="llamacpp", url=srv.url)
    request = CompletionRequest(Context(prefix="a", suffix=""))
    async with Engine(settings_for(config)) as engine:
        first_text = asyncio.Event()
        task = asyncio.create_task(engine.complete(request, on_text=lambda _t: first_text.set()))
        await asyncio.wait_for(first_text.wait(), 5)
        assert await engine.cancel(request.id) is True
        with pytest.raises(RequestDropped, match="cancelled"):
            await task
        assert await engine.cancel(request.id) is False
        gone = await srv.wait_disconnect(within=2)
    assert gone.chunks_sent < 100


async def test_cancelling_the_caller_closes_the_connection(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(default=Reply(delay_s=10)))
    config = BackendConfig(name="local", type="llamacpp", url=srv.url)
    async with Engine(settings_for(config)) as engine:
        task = asyncio.create_task(engine.complete(CompletionRequest(SEED_CONTEXT)))
        await srv.wait_for(lambda: len(srv.requests) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await srv.wait_disconnect(within=2)


async def test_requests_naming_an_unknown_backend(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp())
    config = BackendConfig(name="local", type="llamacpp", url=srv.url)
    async with Engine(settings_for(config)) as engine:
        with pytest.raises(ConfigError, match="no enabled backend named 'nope'"):
            await engine.complete(CompletionRequest(SEED_CONTEXT, backends=("nope",)))


def sequential(backends: Mapping[str, Backend], settings: Settings) -> SequentialDispatcher:
    return SequentialDispatcher(
        backends, settings.routing.default, fallback=settings.routing.fallback
    )


async def test_sequential_dispatcher_falls_back_and_reports_the_plan(
    loopback: StartServer, refused_url: str
) -> None:
    srv = await loopback(LlamaCpp(fim=False, model_path="/m/qwen2.5-coder-1.5b.gguf"))
    down = BackendConfig(name="down", type="ollama", url=refused_url, model="m")
    up = BackendConfig(name="up", type="llamacpp", url=srv.url)
    async with Engine(settings_for(down, up), sequential) as engine:
        done = await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert done.backend == "up"
    assert done.plan.template == "qwen"
    assert done.middle == 'lo World"'


async def test_sequential_dispatcher_stops_at_a_non_retryable_error(
    loopback: StartServer,
) -> None:
    first = await loopback(Ollama())
    second = await loopback(LlamaCpp())
    missing = BackendConfig(name="o", type="ollama", url=first.url, model="nope:1b")
    local = BackendConfig(name="l", type="llamacpp", url=second.url)
    async with Engine(settings_for(missing, local), sequential) as engine:
        with pytest.raises(ModelNotFound):
            await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert second.requests == []


async def test_sequential_dispatcher_without_fallback(
    loopback: StartServer, refused_url: str
) -> None:
    srv = await loopback(LlamaCpp())
    down = BackendConfig(name="down", type="llamacpp", url=refused_url)
    up = BackendConfig(name="up", type="llamacpp", url=srv.url)
    settings = settings_for(down, up)
    settings.routing.fallback = False
    async with Engine(settings, sequential) as engine:
        with pytest.raises(BackendUnavailable):
            await engine.complete(CompletionRequest(SEED_CONTEXT))
    assert srv.requests == []

"""The first engine is built in the background, after the hotkeys are live (issue 11's
start time): a request that comes first waits for it, a failed build reaches the request,
and a cancelled early request does not cancel the build."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.app import default_completer, load_backend_stack
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.swappable import SwappableCompleter
from anyfill.daemon.errors import ConfigError
from tests.servers import LlamaCpp, Reply
from tests.servers.fixtures import StartServer

CONTEXT = Context(prefix="def add(a, b):\n    return ", suffix="\n")


def settings_for(url: str) -> Settings:
    return Settings(
        backends=[BackendConfig(name="local", type="llamacpp", url=url)],
        routing=RoutingConfig(default=["local"]),
    )


def held_prepare(release: threading.Event) -> Any:
    """A ``prepare`` that loads the real backend stack, then holds until released."""

    def prepare() -> None:
        load_backend_stack()
        assert release.wait(10)

    return prepare


async def test_a_request_before_the_engine_is_built_waits_and_is_answered(
    loopback: StartServer,
) -> None:
    server = await loopback(LlamaCpp(default=Reply(text="a + b")))
    release = threading.Event()
    async with SwappableCompleter(default_completer, EventBus()) as completer:
        building = completer.start_soon(settings_for(server.url), prepare=held_prepare(release))
        request = asyncio.create_task(completer.complete(CompletionRequest(CONTEXT)))
        await asyncio.sleep(0.2)
        assert not request.done()
        assert completer.current is None
        assert not server.requests
        release.set()
        completion = await asyncio.wait_for(request, 10)
        assert (completion.backend, completion.middle) == ("local", "a + b")
        assert building.done()
        assert completer.current is not None


async def test_a_cancelled_early_request_leaves_the_build_running(loopback: StartServer) -> None:
    server = await loopback(LlamaCpp(default=Reply(text="b + a")))
    release = threading.Event()
    async with SwappableCompleter(default_completer, EventBus()) as completer:
        building = completer.start_soon(settings_for(server.url), prepare=held_prepare(release))
        early = asyncio.create_task(completer.complete(CompletionRequest(CONTEXT)))
        await asyncio.sleep(0.1)
        early.cancel()
        await asyncio.wait([early])
        assert early.cancelled()
        release.set()
        await asyncio.wait_for(building, 10)
        completion = await completer.complete(CompletionRequest(CONTEXT))
        assert completion.middle == "b + a"


async def test_a_failed_build_reaches_the_request_with_its_error() -> None:
    def broken(settings: Settings, bus: EventBus, leases: object) -> Any:
        raise ConfigError("backend 'local': the test's broken factory")

    async with SwappableCompleter(broken, EventBus()) as completer:
        building = completer.start_soon(settings_for("http://127.0.0.1:9"))
        with pytest.raises(ConfigError, match="broken factory"):
            await completer.complete(CompletionRequest(CONTEXT))
        assert isinstance(building.exception(), ConfigError)


async def test_closing_while_the_engine_builds_stops_cleanly(loopback: StartServer) -> None:
    server = await loopback(LlamaCpp())
    release = threading.Event()
    completer = SwappableCompleter(default_completer, EventBus())
    building = completer.start_soon(settings_for(server.url), prepare=held_prepare(release))
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(completer.aclose())
    await asyncio.sleep(0.05)
    release.set()  # the thread ends on its own; the close does not wait for the engine
    await asyncio.wait_for(closing, 10)
    assert building.cancelled()
    assert completer.current is None

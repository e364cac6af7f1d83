"""Live reload in-process: the engine swap keeps running requests on the old backends, the
watcher turns each settled version of the file into applied or rejected settings events."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.app import default_completer
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import Problem
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.swappable import SwappableCompleter
from anyfill.daemon.settings.reload import (
    ConfigWatcher,
    Reloader,
    SettingsApplied,
    SettingsRejected,
)
from tests.servers import LlamaCpp, Reply
from tests.servers.fixtures import StartServer
from tests.servers.http import LoopbackServer

CONTEXT = Context(prefix="def add(a, b):\n    return ", suffix="\n")


def settings_for(url: str, name: str) -> Settings:
    return Settings(
        backends=[BackendConfig(name=name, type="llamacpp", url=url)],
        routing=RoutingConfig(default=[name]),
    )


def config_text(url: str, name: str, max_tokens: int = 64) -> str:
    return (
        f'[[backends]]\nname = "{name}"\ntype = "llamacpp"\nurl = "{url}"\n'
        f'max_tokens = {max_tokens}\n\n[routing]\ndefault = ["{name}"]\n'
    )


async def arrived(server: LoopbackServer) -> None:
    """Until the server has received a request (polled: the server has no event for it)."""
    async with asyncio.timeout(5):
        while not server.requests:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_a_running_request_finishes_on_the_old_engine_the_next_uses_the_new(
    loopback: StartServer,
) -> None:
    old = await loopback(LlamaCpp(Reply(text="a + b", delay_s=0.5)))
    new = await loopback(LlamaCpp(default=Reply(text="b + a")))
    completer = SwappableCompleter(default_completer, EventBus())
    async with completer:
        await completer.start(settings_for(old.url, "old"))
        running = asyncio.create_task(completer.complete(CompletionRequest(CONTEXT)))
        await arrived(old)
        await completer.replace(settings_for(new.url, "new"))
        nxt = await completer.complete(CompletionRequest(CONTEXT))
        first = await running
        assert (first.backend, first.middle) == ("old", "a + b")
        assert (nxt.backend, nxt.middle) == ("new", "b + a")
        assert len(old.requests) == 1
        assert completer.running == 0


async def test_a_cancel_reaches_the_engine_the_request_runs_on(loopback: StartServer) -> None:
    old = await loopback(LlamaCpp(Reply(text="never", delay_s=5)))
    new = await loopback(LlamaCpp())
    async with SwappableCompleter(default_completer, EventBus()) as completer:
        await completer.start(settings_for(old.url, "old"))
        request = CompletionRequest(CONTEXT)
        running = asyncio.create_task(completer.complete(request))
        await arrived(old)
        await completer.replace(settings_for(new.url, "new"))
        assert await completer.cancel(request.id)
        await asyncio.wait([running])
        assert running.exception() is not None
        assert completer.running == 0


async def test_the_watcher_applies_good_versions_and_rejects_bad_ones(
    tmp_path: Path, loopback: StartServer
) -> None:
    server = await loopback(LlamaCpp())
    path = tmp_path / "config.toml"
    path.write_text(config_text(server.url, "first"))
    bus = EventBus()
    events = bus.subscribe(SettingsApplied, SettingsRejected, Problem)
    applied: list[tuple[Settings, Settings]] = []

    async def apply(old: Settings, new: Settings) -> list[str]:
        applied.append((old, new))
        return []

    current = settings_for(server.url, "first")
    reloader = Reloader(path, current, apply, bus, environ={})
    async with ConfigWatcher(path, reloader.on_text, poll_s=0.02, settle_s=0.1):
        bad = config_text(server.url, "first", max_tokens=0)
        path.write_text(bad)
        rejected = await asyncio.wait_for(events.__anext__(), 5)
        assert isinstance(rejected, SettingsRejected)
        assert rejected.problems == (
            f"{path}:5: backends[0].max_tokens: must be at least 1; found 0",
        )
        problem = await asyncio.wait_for(events.__anext__(), 5)
        assert isinstance(problem, Problem)
        assert problem.kind == "config_invalid"
        assert "the last good settings stay in force" in problem.fix
        assert applied == []
        assert reloader.current is current

        path.write_text(config_text(server.url, "second"))
        event = await asyncio.wait_for(events.__anext__(), 5)
        assert isinstance(event, SettingsApplied)
        assert event.changed == ("backends", "routing")
        assert [b.name for b in reloader.current.backends] == ["second"]
        assert applied[0][0] is current


async def test_two_actions_on_one_hotkey_and_a_removed_file_change_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from anyfill.daemon.app import check_hotkeys

    path = tmp_path / "config.toml"
    path.write_text("")
    bus = EventBus()
    events = bus.subscribe(SettingsApplied, SettingsRejected)
    applied: list[Settings] = []

    async def apply(old: Settings, new: Settings) -> list[str]:
        applied.append(new)
        return []

    reloader = Reloader(path, Settings(), apply, bus, environ={}, check=check_hotkeys)
    caplog.set_level(logging.WARNING, logger="anyfill.reload")
    async with ConfigWatcher(path, reloader.on_text, poll_s=0.02, settle_s=0.1):
        path.write_text('[hotkeys]\npreview = "<ctrl>+<alt>+<space>"\n')
        rejected = await asyncio.wait_for(events.__anext__(), 5)
        assert isinstance(rejected, SettingsRejected)
        assert rejected.problems == (
            f"{path}:1: hotkeys: preview and complete are both <ctrl>+<alt>+<space>",
        )
        path.unlink()
        await asyncio.sleep(0.5)
        assert f"{path}: the file was removed; the settings in force stay" in caplog.text
    assert applied == []

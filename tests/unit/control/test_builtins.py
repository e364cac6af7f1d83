"""The built-in commands over a real socket, driving a real Pipeline whose desktop ports and
completer are faked at their edge (as in tests/unit/desktop): a control ``trigger`` is a
hotkey press, ``status`` tells the state without any captured text, pause holds presses."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.control.builtins import install_builtins
from anyfill.daemon.control.client import call
from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.core import Core
from anyfill.daemon.desktop.hotkeys import Action
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.errors import CommandRefused
from tests.unit.desktop.fakes import FakeCompleter
from tests.unit.desktop.test_pipeline import build

SECRET_MIDDLE = "the completed secret ✓"


@dataclass
class Running:
    pipeline: Pipeline
    completer: FakeCompleter
    keys: Any
    commands: Commands
    pressed: list[Action]


@pytest.fixture
async def running(runtime: Path) -> AsyncIterator[Running]:
    completer = FakeCompleter(middle=SECRET_MIDDLE)
    pipeline, _, keys, _, _ = build(completer=completer)
    pressed: list[Action] = []
    core = Core(Settings(), EventBus())
    core.attach(pipeline, None)
    core.desktop = "x11"
    hotkey_callback = core.trigger

    def on_trigger(action: Action) -> None:  # what the hotkey source calls: Core.trigger
        pressed.append(action)
        hotkey_callback(action)

    core.trigger = on_trigger  # type: ignore[method-assign]
    commands = Commands()
    install_builtins(commands, core)
    async with ControlServer(commands) as server:
        await server.start_serving()
        yield Running(pipeline, completer, keys, commands, pressed)
    await pipeline.aclose()


async def ask(cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    return await asyncio.to_thread(call, cmd, args)


async def test_ping_says_who_answers(running: Running) -> None:
    answer = await ask("ping")
    assert answer["pid"] == os.getpid()
    assert answer["protocol"] == 1
    assert answer["ui"] is None
    assert {"ping", "trigger", "status", "pause", "resume"} <= set(answer["commands"])
    running.commands.ui = "tray"
    assert (await ask("ping"))["ui"] == "tray"


async def test_trigger_is_a_hotkey_press(running: Running) -> None:
    assert await ask("trigger", {"action": "complete"}) == {"accepted": True, "action": "complete"}
    assert running.pressed == ["complete"]
    task = running.pipeline.current
    assert task is not None
    await asyncio.wait_for(task, 10)
    assert running.keys.pasted == [SECRET_MIDDLE]
    assert running.pipeline.history[-1].status == "inserted"


async def test_trigger_wait_answers_the_outcome_without_its_text(running: Running) -> None:
    answer = await ask("trigger", {"action": "preview", "wait": True})
    outcome = answer["outcome"]
    assert (outcome["action"], outcome["status"], outcome["method"]) == (
        "preview",
        "inserted",
        "paste",
    )
    assert outcome["chars"] == len(SECRET_MIDDLE)
    assert outcome["capture"] == "keyboard"
    assert SECRET_MIDDLE not in json.dumps(answer, ensure_ascii=False)
    assert "Hello" not in json.dumps(answer)  # the captured prefix


async def test_cancel_over_the_socket_stops_a_running_press(running: Running) -> None:
    running.completer.gate = asyncio.Event()  # a slow backend
    waiting = asyncio.ensure_future(ask("trigger", {"action": "complete", "wait": True}))
    for _ in range(200):
        if running.completer.requests:
            break
        await asyncio.sleep(0.01)
    assert await ask("trigger", {"action": "cancel"}) == {"accepted": True, "action": "cancel"}
    answer = await asyncio.wait_for(waiting, 10)
    assert answer["outcome"]["status"] == "cancelled"
    assert running.keys.pasted == []
    assert running.pressed == ["complete", "cancel"]


@pytest.mark.parametrize(
    "args",
    [{}, {"action": "explode"}, {"action": 1}, {"action": "complete", "wait": "yes"}],
    ids=["missing", "unknown", "not a string", "wait not a bool"],
)
async def test_bad_trigger_arguments_are_refused_and_nothing_is_pressed(
    args: dict[str, Any], running: Running
) -> None:
    with pytest.raises(CommandRefused) as info:
        await ask("trigger", args)
    assert info.value.code == "bad-args"
    assert running.pressed == []


async def test_status_before_and_after_a_press(running: Running) -> None:
    before = await ask("status")
    assert before["state"] == "idle"
    assert before["last"] is None
    assert before["presses"] == 0
    assert before["backends"] == list(Settings().routing.default)
    assert before["hotkeys"]["complete"] == Settings().hotkeys.complete
    assert before["desktop"] == "x11"
    assert before["pid"] == os.getpid()
    await ask("trigger", {"action": "complete", "wait": True})
    after = await ask("status")
    assert after["presses"] == 1
    assert after["last"]["status"] == "inserted"
    assert after["last"]["chars"] == len(SECRET_MIDDLE)
    assert 0 <= after["last"]["age_s"] < 60
    assert SECRET_MIDDLE not in json.dumps(after, ensure_ascii=False)


async def test_status_says_working_while_a_press_runs(running: Running) -> None:
    running.completer.gate = asyncio.Event()
    await ask("trigger", {"action": "complete"})
    assert (await ask("status"))["state"] == "working"
    running.completer.gate.set()
    task = running.pipeline.current
    assert task is not None
    await asyncio.wait_for(task, 10)
    assert (await ask("status"))["state"] == "idle"


async def test_pause_holds_presses_and_resume_releases_them(running: Running) -> None:
    assert await ask("pause") == {"state": "paused"}
    assert (await ask("status"))["state"] == "paused"
    with pytest.raises(CommandRefused) as info:
        await ask("trigger", {"action": "complete"})
    assert info.value.code == "paused"
    assert "anyfill resume" in str(info.value)
    # A real hotkey press while paused is ignored too.
    running.pipeline.trigger("complete")
    assert running.pipeline.current is None
    assert running.completer.requests == []
    assert await ask("resume") == {"state": "idle"}
    answer = await ask("trigger", {"action": "complete", "wait": True})
    assert answer["outcome"]["status"] == "inserted"


async def test_status_shows_sections_other_layers_add(running: Running) -> None:
    running.commands.add_status_section("tray", lambda: {"icon": "idle", "host": True})

    def broken() -> None:
        raise RuntimeError("tray gone")

    running.commands.add_status_section("broken", broken)
    sections = (await ask("status"))["sections"]
    assert sections["tray"] == {"icon": "idle", "host": True}
    assert sections["broken"] == {"error": "RuntimeError: tray gone"}


async def test_a_command_another_layer_registers_is_reachable(running: Running) -> None:
    shown: list[dict[str, Any]] = []

    async def show_settings(args: dict[str, Any]) -> dict[str, Any]:
        shown.append(args)
        return {"shown": True}

    running.commands.register("show-settings", show_settings, summary="open the settings")
    assert await ask("show-settings", {"page": "backends"}) == {"shown": True}
    assert shown == [{"page": "backends"}]
    assert (await ask("ping"))["commands"]["show-settings"] == "open the settings"


async def test_status_reads_as_words_with_the_tray_and_the_managed_server(
    running: Running,
) -> None:
    """`anyfill status` printed the tray's section as a raw dict and said nothing about the
    managed server."""
    from anyfill.daemon.control.render import managed_line, status_text

    running.commands.add_status_section("tray", lambda: {"icon": True, "host": True})
    answer = await ask("status")
    assert answer["managed"] == []  # this core runs no managed server
    text = status_text(answer)
    assert "tray: the icon shows in the system tray" in text
    assert "{" not in text
    answer["sections"]["tray"] = {"icon": False, "host": False}
    assert "no system tray here, so no icon" in status_text(answer)

    ready = {"backend": "managed", "state": "ready", "url": "http://127.0.0.1:41234"}
    ready |= {"pid": 4242, "model": "tiny.gguf", "detail": "", "fix": ""}
    assert (
        managed_line(ready) == "managed ready at http://127.0.0.1:41234 (pid 4242, model tiny.gguf)"
    )
    missing = {"backend": "managed", "state": "missing_binary", "url": "", "pid": None}
    missing |= {
        "model": "",
        "detail": "llama-server is not installed",
        "fix": "pip install 'anyfill[local]'",
    }
    assert managed_line(missing) == (
        "managed cannot start: nothing to run llama.cpp with: llama-server is not installed; "
        "pip install 'anyfill[local]'"
    )

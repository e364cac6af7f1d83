"""``anyfill trigger`` / ``status`` / ``pause`` / ``resume`` as processes, the way a desktop
shortcut runs them: exit codes, messages, and the light import path of ``trigger``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.render import duration, outcome_line
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.control.trigger_cmd import parse

HEAVY = ("click", "pydantic", "importlib.metadata", "typing", "asyncio", "httpx", "anyfill.config")
PROBE = f"""
import sys
from anyfill.daemon.launcher import main
code = main(sys.argv[1:])
print({{"code": code, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}, file=sys.stderr)
"""


def anyfill(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.launcher", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["complete"], ("complete", False)),
        (["preview", "--wait"], ("preview", True)),
        (["--wait", "cancel"], ("cancel", True)),
        ([], None),
        (["--help"], None),
        (["complete", "preview"], None),
        (["complete", "--wait", "--wait"], None),
        (["explode"], None),
    ],
)
def test_parse_takes_only_the_exact_fast_form(
    argv: list[str], parsed: tuple[str, bool] | None
) -> None:
    assert parse(argv) == parsed


def test_trigger_without_a_daemon_says_so_and_exits_3(runtime: Path) -> None:
    result = anyfill("trigger", "complete")
    assert result.returncode == 3
    assert result.stderr.startswith("anyfill: anyfill is not running")
    assert "start it with 'anyfill run'" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["pause"], ["resume"]])
def test_other_commands_without_a_daemon_exit_3(command: list[str], runtime: Path) -> None:
    result = anyfill(*command)
    assert result.returncode == 3
    assert "anyfill is not running" in result.stderr


def test_anything_but_the_fast_form_gets_clicks_usage(runtime: Path) -> None:
    helped = anyfill("trigger", "--help")
    assert helped.returncode == 0
    assert "Usage: anyfill trigger [OPTIONS] {complete|preview|cancel}" in helped.stdout
    typo = anyfill("trigger", "complet")
    assert typo.returncode == 2
    assert "'complet' is not one of 'complete', 'preview', 'cancel'" in typo.stderr


async def test_trigger_delivers_with_only_light_imports(runtime: Path) -> None:
    received: list[dict[str, Any]] = []
    commands = Commands()
    commands.register("trigger", lambda args: received.append(args) or {"accepted": True})
    async with ControlServer(commands) as server:
        await server.start_serving()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PROBE, "trigger", "complete", stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert received == [{"action": "complete"}]
    report = eval(stderr.decode().strip().splitlines()[-1])  # the probe's own dict literal
    assert report == {"code": 0, "heavy": []}


async def test_a_refused_trigger_exits_1_with_the_daemons_message(runtime: Path) -> None:
    commands = Commands()

    def refuse(args: dict[str, Any]) -> None:
        from anyfill.daemon.control.commands import CommandError

        raise CommandError("anyfill is paused; resume it", "paused")

    commands.register("trigger", refuse)
    async with ControlServer(commands) as server:
        await server.start_serving()
        result = await asyncio.to_thread(anyfill, "trigger", "preview")
    assert result.returncode == 1
    assert result.stderr == "anyfill: error: anyfill is paused; resume it\n"


def test_outcome_line_and_durations() -> None:
    outcome = {
        "action": "complete",
        "status": "inserted",
        "app": "Mousepad",
        "method": "paste",
        "capture": "accessibility",
        "chars": 12,
        "ms": 143.4,
        "reason": "",
    }
    assert outcome_line(outcome) == (
        "inserted in Mousepad (paste, capture accessibility, 12 chars, 143 ms)"
    )
    kept = {"status": "kept", "app": "xterm", "ms": 80, "reason": "the focus moved"}
    assert outcome_line(kept) == "kept in xterm (80 ms): the focus moved"
    assert [duration(s) for s in (5, 125, 7200, 172800)] == ["5 s", "2 min", "2.0 h", "2.0 days"]
    assert json.dumps(outcome)  # what status --json prints is plain JSON

"""``anyfill settings`` with a tray running: the tray shows its own settings window (one
window, and the bridge its Test runs on) instead of a second panel being opened."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.server import ControlServer


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private XDG_RUNTIME_DIR (a socket path must fit in 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="afs-"))
    path.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def anyfill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.launcher", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )


async def test_a_running_tray_is_asked_to_show_its_settings_window(
    runtime: Path, tmp_path: Path
) -> None:
    shown: list[dict[str, Any]] = []
    commands = Commands()
    commands.register("ping", lambda args: {"commands": commands.summaries()})
    commands.register("show-settings", lambda args: shown.append(args) or {})
    async with ControlServer(commands) as server:
        await server.start_serving()
        config = str(tmp_path / "config.toml")
        result = await asyncio.to_thread(anyfill, "--config", config, "settings")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "the running anyfill opened its settings window\n"
    assert shown == [{}]


def test_without_a_display_it_says_so_instead_of_crashing(runtime: Path, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    config = tmp_path / "config.toml"
    result = subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.launcher", "--config", str(config), "settings"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == (
        "anyfill: error: the settings panel needs a display (DISPLAY or WAYLAND_DISPLAY is not "
        f"set); without one, edit {config} and check it with 'anyfill config validate'\n"
    )

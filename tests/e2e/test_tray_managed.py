"""`anyfill run` with the tray and a managed backend whose model is not downloaded, for
real (issue #13): the core's event reaches the tray through serve_core, the user is told
the fix, and, with no tray icon to offer it from, the download question opens by itself;
Escape declines and nothing is downloaded."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, XSession, wait_until

pytestmark = pytest.mark.desktop

MODEL = "qwen2.5-coder-0.5b"
QUESTION = "anyfill: download the FIM model?"


def _config(workdir: Path) -> str:
    binary = workdir / "bin" / "llama-server"  # exists: the model is what is missing
    binary.parent.mkdir(exist_ok=True)
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return f"""
[[backends]]
name = "managed"
type = "llamacpp-managed"
model = "{MODEL}"
[backends.server]
binary = "{binary}"

[routing]
default = ["managed"]

[models]
dir = "{workdir / "models"}"
endpoint = "http://127.0.0.1:9"

[hotkeys]
complete = "<ctrl>+<alt>+<f7>"
preview = "<ctrl>+<alt>+<f8>"
cancel = "<ctrl>+<alt>+<f9>"

[logging]
level = "DEBUG"
file = false
"""


def _question(x: XSession) -> int:
    out = x.run("xdotool", "search", "--onlyvisible", "--name", QUESTION, check=False)
    return int(out.split()[0]) if out.split() else 0


def test_a_missing_model_is_told_and_asked_about_and_escape_declines(x: XSession) -> None:
    daemon = Daemon(x, _config(x.workdir), name="tray-managed", headless=False)
    try:
        wait_until(lambda: "Fix: anyfill model pull" in daemon.log(), 20, "the fix")
        log = daemon.log()
        assert f"anyfill cannot start its llama.cpp server: the model {MODEL} " in log
        assert "531 MB) is not downloaded yet" in log
        wait_until(lambda: _question(x) != 0, 10, "the download question")
        # The catch-up once the backends are built (after ready) finds the managed server
        # through serve_core's core.backends; its state then may already be missing_model,
        # or still stopped with the missing_model event following it live (both told above).
        wait_until(
            lambda: (
                "managed server 'managed' is " in daemon.log()
                and "(caught up once the backends were built)" in daemon.log()
            ),
            10,
            "the catch-up",
        )
        x.focus(_question(x))
        x.key("Escape")
        wait_until(lambda: f"download of {MODEL} declined" in daemon.log(), 10, "the no")
        assert _question(x) == 0
        models = x.workdir / "models"
        assert not models.exists() or list(models.iterdir()) == []
    finally:
        assert daemon.stop() == 0

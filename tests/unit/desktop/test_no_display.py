"""``anyfill run`` (with or without the tray) without a display: one clear line and exit
status 1, never a Qt abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """
[[backends]]
name = "stub"
type = "llamacpp"
url = "http://127.0.0.1:9"

[routing]
default = ["stub"]

[logging]
file = false
"""


@pytest.mark.parametrize("mode", [["--headless"], []], ids=["headless", "tray"])
@pytest.mark.parametrize(
    ("extra_env", "message"),
    [
        ({}, "anyfill: error: no X display: DISPLAY is not set\n"),
        (
            {"WAYLAND_DISPLAY": "/nonexistent/wayland-0", "XDG_SESSION_TYPE": "wayland"},
            "anyfill: error: no Wayland display: cannot connect to /nonexistent/wayland-0 "
            "(No such file or directory)\n",
        ),
    ],
)
def test_no_display_is_a_clear_error(
    tmp_path: Path, extra_env: dict[str, str], message: str, mode: list[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE")
    }
    env.update(extra_env, XDG_STATE_HOME=str(tmp_path), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    result = subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.cli", "--config", str(config), "run", *mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.endswith(message)
    assert "Traceback" not in result.stderr

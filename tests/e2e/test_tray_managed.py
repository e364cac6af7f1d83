"""`anyfill run` with the tray and a managed backend whose model is not downloaded, for
real (issue #13): the core's event reaches the tray through serve_core, the user is told
the fix, and, with no tray icon to offer it from, the download question opens by itself;
Escape declines and nothing is downloaded."""

from __future__ import annotations

import os
import pty
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.daemon.models.catalog import find
from tests.e2e.harness import Daemon, XSession, wait_until
from tests.servers.fixtures import refused_url  # noqa: F401
from tests.servers.hfhub import HfHub, HubFile
from tests.servers.http import LoopbackServer

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


def _run_in_terminal(
    x: XSession, config: str, answer: bytes
) -> tuple[subprocess.Popen[bytes], list[bytes], int]:
    """``anyfill run`` (with the tray) in a pseudo-terminal, as a user types it; ``answer``
    goes to its prompt. Returns the process, its output so far (filled by a thread) and the
    terminal's leader end."""
    path = x.workdir / "terminal.toml"
    path.write_text(config)
    runtime = x.workdir / "run-terminal"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**x.env, "XDG_RUNTIME_DIR": str(runtime)}
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "anyfill.daemon.cli", "--config", str(path), "run"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    output: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: the process ended
                return
            if not chunk:
                return
            output.append(chunk)

    threading.Thread(target=read, daemon=True).start()
    wait_until(lambda: b"[Y/n]" in b"".join(output), 20, "the download question")
    os.write(leader, answer)
    return process, output, leader


@pytest.fixture
def wrong_hub() -> Iterator[LoopbackServer]:
    """A Hub whose file under the catalogue's name is not the pinned one (size and
    checksum differ): anyfill refuses it."""
    model = find(MODEL)
    assert model is not None
    served = HubFile(model.repo_id, model.filename, model.revision, b"GGUF" + bytes(1000))
    responder = HfHub([served])
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        yield hub


@pytest.mark.parametrize("failure", ["no network", "not the pinned file"])
def test_a_failed_download_after_yes_goes_on_like_no(
    x: XSession,
    refused_url: str,  # noqa: F811
    wrong_hub: LoopbackServer,
    failure: str,
) -> None:
    """Issue #25: "y" at the terminal prompt, then the download fails: anyfill still
    starts (tray ready), says why with the fix, and offers the download again."""
    endpoint = refused_url if failure == "no network" else wrong_hub.url
    config = _config(x.workdir).replace(
        'endpoint = "http://127.0.0.1:9"', f'endpoint = "{endpoint}"'
    )
    process, output, leader = _run_in_terminal(x, config, b"y\n")
    text = lambda: b"".join(output).decode(errors="replace")  # noqa: E731
    try:
        wait_until(lambda: "tray ready" in text(), 30, "the tray after the failed download")
        assert process.poll() is None, text()
        said = text()
        assert "anyfill: the download failed: " in said
        if failure == "no network":
            assert f"cannot reach {endpoint}" in said
            assert "check the network" in said
        else:
            assert "with 1004 bytes, anyfill expects 531068128: refused" in said
        assert "the tray menu offers the download again" in said
        assert f"'anyfill model pull {MODEL}'" in said
        # No tray icon in this session: the same offer opens as a question by itself.
        wait_until(lambda: _question(x) != 0, 15, "the download offered again")
        # Stopped with the question still open (SIGTERM, as Ctrl+C in the terminal): a
        # clean exit, not the SIGSEGV of a question deleted while Qt was closing it.
        assert not list((x.workdir / "models").glob("*.gguf*"))  # nothing kept
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(15)
        os.close(leader)
    assert code == 0, text()

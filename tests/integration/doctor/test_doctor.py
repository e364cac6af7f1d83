"""`anyfill doctor` as a user runs it: a subprocess, a real config file, real servers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp

ANYFILL = [sys.executable, "-m", "anyfill.daemon.cli"]


def doctor(config: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ANYFILL_") and key not in {"DISPLAY", "WAYLAND_DISPLAY"}
    }
    full.update(
        HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
        **env,
    )
    return subprocess.run(
        [*ANYFILL, "--config", str(config), "doctor"],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        check=False,
    )


def lines_by_topic(output: str) -> dict[str, tuple[str, str]]:
    found = {}
    for line in output.splitlines():
        status, rest = line.split(" ", 1)
        topic, _, detail = rest.strip().partition("  ")
        found[topic.strip()] = (status, detail.strip())
    return found


@pytest.fixture
def config(tmp_path: Path, refused_url: str) -> Iterator[Path]:
    with LoopbackServer.in_thread(LlamaCpp()) as server:
        path = tmp_path / "config.toml"
        path.write_text(
            "[[backends]]\n"
            'name = "local"\ntype = "llamacpp"\n'
            f'url = "{server.url}"\n'
            "[[backends]]\n"
            'name = "dead"\ntype = "ollama"\nmodel = "qwen2.5-coder:1.5b-base"\n'
            f'url = "{refused_url}"\n'
            "[[backends]]\n"
            'name = "codestral"\ntype = "mistral-fim"\nurl = "https://codestral.mistral.ai"\n'
            "[routing]\n"
            'default = ["local", "dead", "codestral"]\n'
        )
        yield path


def test_each_backend_is_checked_and_failures_say_the_fix(config: Path, tmp_path: Path) -> None:
    result = doctor(config, tmp_path)
    topics = lines_by_topic(result.stdout)
    assert result.returncode == 1, result.stdout + result.stderr
    assert topics["config"][0] == "ok"
    status, detail = topics["backend local"]
    assert status == "ok"
    assert "answers" in detail
    assert "fills in the middle natively" in detail
    # Fallbacks behind a working backend only warn: the chain still answers.
    status, detail = topics["backend dead"]
    assert status == "warn"
    assert "nothing listens on" in detail
    assert "(a fallback; 'local' answers)" in detail
    status, detail = topics["backend codestral"]
    assert status == "warn"
    assert "anyfill config set-key codestral" in detail
    assert "MISTRAL_API_KEY" in detail
    assert topics["routing"] == ("ok", "local -> dead -> codestral")


def test_desktop_without_display_says_x11_is_needed(config: Path, tmp_path: Path) -> None:
    topics = lines_by_topic(doctor(config, tmp_path).stdout)
    assert topics["desktop"] == ("fail", "DISPLAY is not set: hotkeys need an X11 session")
    gone = str(tmp_path / "wayland-0")
    wayland = lines_by_topic(doctor(config, tmp_path, WAYLAND_DISPLAY=gone).stdout)
    assert wayland["desktop"][0] == "fail"
    assert f"no Wayland display: cannot connect to {gone}" in wayland["desktop"][1]


def test_unreachable_display_is_named(config: Path, tmp_path: Path) -> None:
    topics = lines_by_topic(doctor(config, tmp_path, DISPLAY=":987").stdout)
    status, detail = topics["desktop"]
    assert status == "fail"
    assert "cannot open the X display ':987'" in detail


def test_plaintext_keyring_is_a_warning(config: Path, tmp_path: Path) -> None:
    status, detail = lines_by_topic(doctor(config, tmp_path).stdout)["keyring"]
    assert status == "warn"
    assert "unencrypted" in detail


@pytest.mark.desktop
@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="needs Xvfb (apt: xvfb)")
def test_a_real_display_passes(config: Path, tmp_path: Path) -> None:
    from tests.e2e.harness import XSession

    with XSession.start() as session:
        topics = lines_by_topic(doctor(config, tmp_path, DISPLAY=session.display).stdout)
    assert topics["desktop"] == ("ok", f"X display {session.display} with XTEST")


def test_a_llama_server_whose_model_cannot_infill_fails(tmp_path: Path) -> None:
    # /health answers, but /infill says 501 and no template fits the model: no middle ever.
    server_kind = LlamaCpp(fim=False, model_path="/m/mystery-chat.gguf", vocab=())
    with LoopbackServer.in_thread(server_kind) as server:
        path = tmp_path / "config.toml"
        path.write_text(
            f'[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "{server.url}"\n'
            '[routing]\ndefault = ["local"]\n'
        )
        topics = lines_by_topic(doctor(path, tmp_path).stdout)
    status, detail = topics["backend local"]
    assert status == "fail"
    assert "no FIM template fits" in detail


def test_the_first_backend_down_is_still_a_failure(tmp_path: Path, refused_url: str) -> None:
    with LoopbackServer.in_thread(LlamaCpp()) as server:
        path = tmp_path / "config.toml"
        path.write_text(
            f'[[backends]]\nname = "first"\ntype = "llamacpp"\nurl = "{refused_url}"\n'
            f'[[backends]]\nname = "second"\ntype = "llamacpp"\nurl = "{server.url}"\n'
            '[routing]\ndefault = ["first", "second"]\n'
        )
        topics = lines_by_topic(doctor(path, tmp_path).stdout)
    assert topics["backend first"][0] == "fail"
    assert topics["backend second"][0] == "ok"


def test_daemon_not_running_names_the_socket(config: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    topics = lines_by_topic(doctor(config, tmp_path, XDG_RUNTIME_DIR=str(runtime)).stdout)
    socket = runtime / "anyfill" / "control.sock"
    assert topics["daemon"] == ("ok", f"not running ('anyfill run' starts it; socket {socket})")
    assert not (runtime / "anyfill").exists()  # doctor only looks


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_control_directory_of_another_user_fails(config: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    (runtime / "anyfill").mkdir(mode=0o700)
    os.chown(runtime / "anyfill", 65534, 65534)
    topics = lines_by_topic(doctor(config, tmp_path, XDG_RUNTIME_DIR=str(runtime)).stdout)
    status, detail = topics["daemon"]
    assert status == "fail"
    assert "belongs to another user (uid 65534)" in detail

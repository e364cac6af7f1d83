"""``anyfill model list|pull|use|rm`` as a user runs them: a subprocess, real files, and a
loopback Hub (tests/servers/hfhub.py) or a port where nothing listens."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.daemon.models.catalog import find
from tests.servers.hfhub import HfHub, HubFile
from tests.servers.http import LoopbackServer
from tests.unit.foundation.test_cli import run

SMALL = find("qwen2.5-coder-0.5b")
assert SMALL is not None


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }


def _models(home: dict[str, str]) -> Path:
    return Path(home["XDG_CACHE_HOME"]) / "anyfill" / "models"


def _config(home: dict[str, str]) -> Path:
    return Path(home["XDG_CONFIG_HOME"]) / "anyfill" / "config.toml"


def test_list_shows_the_catalogue_and_what_is_in_use(home: dict[str, str]) -> None:
    result = run("model", "list", env=home)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"kept in {_models(home)}" in out
    assert "qwen2.5-coder-1.5b   Qwen2.5-Coder 1.5B base, Q8_0; not downloaded (1.65 GB)" in out
    assert "<- used by 'managed'" in out
    assert "qwen2.5-coder-0.5b   Qwen2.5-Coder 0.5B base, Q8_0; not downloaded (531 MB)" in out
    assert "StarCoder2" in out
    assert "Codestral" in out


def test_use_writes_the_config_and_keeps_its_comments(home: dict[str, str], tmp_path: Path) -> None:
    assert run("config", "init", env=home).returncode == 0
    before = _config(home).read_text()

    result = run("model", "use", "qwen2.5-coder-0.5b", env=home)

    assert result.returncode == 0, result.stderr
    assert "'anyfill model pull qwen2.5-coder-0.5b'" in result.stdout
    after = _config(home).read_text()
    assert after.count("#") == before.count("#")
    managed = [b for b in tomllib.loads(after)["backends"] if b["name"] == "managed"]
    assert managed[0]["model"] == "qwen2.5-coder-0.5b"

    gguf = tmp_path / "mine" / "starcoder2-3b.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    result = run("model", "use", str(gguf), env=home)
    assert result.returncode == 0, result.stderr
    managed = [
        b
        for b in tomllib.loads(_config(home).read_text())["backends"]
        if b["type"] == "llamacpp-managed"
    ]
    assert managed[0]["model"] == str(gguf)


def test_use_refuses_what_does_not_exist_and_changes_nothing(
    home: dict[str, str], tmp_path: Path
) -> None:
    result = run("model", "use", "qwen-huge", env=home)
    assert result.returncode == 2
    assert "known: qwen2.5-coder-1.5b, qwen2.5-coder-0.5b" in result.stderr
    result = run("model", "use", str(tmp_path / "nope.gguf"), env=home)
    assert result.returncode == 2
    assert "no GGUF file at" in result.stderr
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b'{"__metadata__": {}}')
    result = run("model", "use", str(weights), env=home)
    assert result.returncode == 2
    assert "is not a GGUF file" in result.stderr
    assert not _config(home).exists()


def test_use_adds_a_managed_backend_to_an_older_config(home: dict[str, str]) -> None:
    _config(home).parent.mkdir(parents=True)
    _config(home).write_text(
        '[[backends]]\nname = "mine"\ntype = "llamacpp"\nurl = "http://127.0.0.1:8080"\n\n'
        '[routing]\ndefault = ["mine"]\n'
    )
    result = run("model", "use", "qwen2.5-coder-0.5b", env=home)
    assert result.returncode == 0, result.stderr
    data = tomllib.loads(_config(home).read_text())
    assert data["routing"]["default"] == ["mine", "managed"]
    assert data["backends"][1] == {
        "name": "managed",
        "type": "llamacpp-managed",
        "model": "qwen2.5-coder-0.5b",
    }


def test_pull_without_network_is_a_clear_error_and_writes_nothing(
    home: dict[str, str], refused_url: str
) -> None:
    env = {**home, "ANYFILL_MODELS__ENDPOINT": refused_url}
    result = run("model", "pull", "qwen2.5-coder-0.5b", "--yes", env=env)
    assert result.returncode == 1
    assert f"cannot reach {refused_url} to download qwen2.5-coder-0.5b" in result.stderr
    assert "Traceback" not in result.stderr
    assert not _models(home).exists() or list(_models(home).iterdir()) == []


def test_pull_asks_first_and_no_means_nothing_happens(
    home: dict[str, str], refused_url: str
) -> None:
    env = {**home, "ANYFILL_MODELS__ENDPOINT": refused_url}
    result = run("model", "pull", "qwen2.5-coder-0.5b", env=env, input="n\n")
    assert result.returncode == 1
    assert (
        f"Download Qwen2.5-Coder 0.5B base, Q8_0 (531 MB) from "
        f"ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF to {_models(home)}? [Y/n]"
    ) in result.stdout
    assert "aborted" in result.stderr
    assert "cannot reach" not in result.stderr  # it never went to the network


@pytest.fixture
def wrong_hub() -> Iterator[LoopbackServer]:
    """A Hub whose file under the catalogue's name is not the pinned one."""
    assert SMALL is not None
    served = HubFile(SMALL.repo_id, SMALL.filename, SMALL.revision, b"GGUF" + bytes(1000))
    responder = HfHub([served])
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        yield hub


def test_pull_refuses_a_file_that_is_not_the_pinned_one(
    home: dict[str, str], wrong_hub: LoopbackServer
) -> None:
    env = {**home, "ANYFILL_MODELS__ENDPOINT": wrong_hub.url}
    result = run("model", "pull", "qwen2.5-coder-0.5b", "--yes", env=env)
    assert result.returncode == 1
    assert "with 1004 bytes, anyfill expects 531068128: refused" in result.stderr
    assert [r.method for r in wrong_hub.requests] == ["HEAD"]
    assert wrong_hub.requests[0].path == (
        f"/{SMALL.repo_id}/resolve/{SMALL.revision}/{SMALL.filename}"
    )
    assert not _models(home).exists() or list(_models(home).iterdir()) == []


def test_rm_deletes_the_file_and_its_partial_download(home: dict[str, str]) -> None:
    assert SMALL is not None
    folder = _models(home)
    folder.mkdir(parents=True)
    (folder / SMALL.filename).write_bytes(b"x" * 2_000_000)
    (folder / (SMALL.filename + ".part")).write_bytes(b"x" * 1_000_000)
    assert run("model", "use", SMALL.name, env=home).returncode == 0

    result = run("model", "rm", SMALL.name, env=home)

    assert result.returncode == 0, result.stderr
    assert "removed qwen2.5-coder-0.5b (3 MB freed)" in result.stdout
    assert "backend 'managed' still names it" in result.stdout
    assert list(folder.iterdir()) == []
    assert "not downloaded" in run("model", "rm", SMALL.name, env=home).stdout


def _run_in_a_terminal(env: dict[str, str], answer: bytes) -> str:
    """`anyfill run --headless` in a pseudo-terminal (no display: it ends after the
    question); all it printed."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "anyfill.daemon.cli", "run", "--headless"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    os.write(leader, answer)
    output = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            output += chunk
    finally:
        process.wait(30)
        os.close(leader)
    return output.decode(errors="replace")


def _fresh_user(home: dict[str, str], refused_url: str, tmp_path: Path) -> dict[str, str]:
    import os

    env = {
        **os.environ,
        **home,
        "ANYFILL_MODELS__ENDPOINT": refused_url,
        "ANYFILL_BACKENDS__LLAMACPP__URL": refused_url,
        "ANYFILL_BACKENDS__OLLAMA__URL": refused_url,
        "ANYFILL_LLAMA_CACHE": str(tmp_path / "no-llama-build"),
        "PATH": "/usr/bin:/bin",
        "DISPLAY": "",
    }
    env.pop("ANYFILL_CONFIG", None)
    return env


def test_run_in_a_terminal_without_any_llama_runtime_says_so_instead_of_downloading(
    home: dict[str, str], refused_url: str, tmp_path: Path
) -> None:
    """Issue #25: no 1.65 GB question for a server that cannot start; the fix first."""
    text = _run_in_a_terminal(_fresh_user(home, refused_url, tmp_path), b"y\n")
    assert "[Y/n]" not in text
    assert "anyfill cannot run llama.cpp itself yet (backend 'managed'): llama-server is" in text
    assert "pip install 'anyfill[local]'" in text
    assert "'anyfill model pull qwen2.5-coder-1.5b'" in text
    assert not _models(home).exists() or list(_models(home).iterdir()) == []


def test_run_in_a_terminal_offers_the_download_first(
    home: dict[str, str], refused_url: str, tmp_path: Path
) -> None:
    """A fresh user's `anyfill run`: no server answers, the model is missing: it asks."""
    import os
    import pty
    import subprocess
    import sys

    binary = tmp_path / "bin" / "llama-server"  # a runtime exists: the model is what is missing
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(0o755)
    env = {
        **_fresh_user(home, refused_url, tmp_path),
        "PATH": f"{binary.parent}:/usr/bin:/bin",
    }
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "anyfill.daemon.cli", "run", "--headless"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    os.write(leader, b"n\n")
    output = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            output += chunk
    finally:
        process.wait(30)
        os.close(leader)
    text = output.decode(errors="replace")
    assert "No model server of yours answers" in text
    assert "Download Qwen2.5-Coder 1.5B base, Q8_0 (1.65 GB)" in text
    assert "'anyfill model pull qwen2.5-coder-1.5b'" in text
    assert not _models(home).exists() or list(_models(home).iterdir()) == []


def test_pull_that_kept_nothing_does_not_promise_a_resume(home: dict[str, str]) -> None:
    """Issue 24: a body that ends before its first byte said 'run again to resume'."""
    assert SMALL is not None
    served = HubFile(SMALL.repo_id, SMALL.filename, SMALL.revision, bytes(SMALL.size))
    responder = HfHub([served], drop_after=0, drops=100, announced_sha256=SMALL.sha256)
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        env = {**home, "ANYFILL_MODELS__ENDPOINT": hub.url}
        result = run("model", "pull", "qwen2.5-coder-0.5b", "--yes", env=env)
    assert result.returncode == 1
    assert "stopped at 0 kB of 531 MB" in result.stderr, result.stderr
    assert "nothing was kept" in result.stderr
    assert "resume" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not _models(home).exists() or list(_models(home).iterdir()) == []

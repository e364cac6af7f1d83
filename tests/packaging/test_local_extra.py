"""The wheel with its ``local`` extra, as a user without a compiler installs it (issue #25):
a fresh venv installed from wheels only with no compiler to reach (``cc``, ``gcc``,
``cmake``... and ``CC``/``CXX`` are programs that fail and are told on), a fresh home, no
llama-server anywhere, and ``anyfill model use FILE.gguf`` gives a completion through the
prebuilt runtime (xllamacpp from PyPI). Under the daemon the
runtime is supervised like llama-server: it answers only with anyfill's key, comes back
after a SIGKILL, and stops with the daemon.

Like tests/packaging/test_bundle.py this runs on what ``packaging/build-bundle`` built
(``ANYFILL_BUNDLE_OUT``; a step of ``.ci/run``), and needs the tests' tiny FIM model
(``ANYFILL_LLAMA_ASSETS``). The pip install reaches PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.harness import MISSING, XSession, wait_until
from tests.llm.server import SKIP_REASON, TINY_FIM_MODEL, find_assets
from tests.packaging.test_bundle import OUT, REPO, only, private_env, run

ASSETS = find_assets()
SYSTEM_PATH = "/usr/bin:/bin"
RUNNER = "anyfill.daemon.managed.prebuilt_server"

pytestmark = [
    pytest.mark.bundle,
    pytest.mark.llamacpp,
    pytest.mark.skipif(
        not OUT, reason="set ANYFILL_BUNDLE_OUT to packaging/build-bundle's output (.ci/run)"
    ),
    pytest.mark.skipif(ASSETS is None, reason=SKIP_REASON),
    pytest.mark.skipif(
        sys.platform != "linux" or not os.path.exists("/proc/cpuinfo"),
        reason="the prebuilt runtime's CPU check and /proc are Linux's",
    ),
]


# What a build of a C/C++ extension or of llama.cpp would run. Under the install each one
# is a program that notes it was called and fails.
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "cmake", "make", "ninja", "ld")


def no_compiler(where: Path) -> tuple[dict[str, str], Path]:
    """An environment in which nothing can be compiled: PATH holds only the venv and
    ``where``, whose ``cc``, ``gcc``, ``cmake``... write their name to the returned file and
    fail, and ``CC``/``CXX`` (which build tools prefer to PATH) are such programs too."""
    calls = where / "calls"
    where.mkdir()
    for name in COMPILERS:
        shim = where / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 1\n')
        shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"CFLAGS", "CXXFLAGS", "LDFLAGS"}}
    env.update(PATH=str(where), CC=str(where / "cc"), CXX=str(where / "c++"))
    return env, calls


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only ``anyfill[local]`` from the built wheel, installed from
    wheels only (``--only-binary=:all:``: a package with no wheel for this machine fails
    the install instead of being built) and with no compiler to reach."""
    wheel = only((REPO / OUT).resolve(), "anyfill-*.whl")
    base = tmp_path_factory.mktemp("local-venv")
    where = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    env, calls = no_compiler(base / "no-compiler")
    env["PATH"] = f"{where / 'bin'}:{env['PATH']}"
    for name in ("cc", "gcc", "g++", "cmake"):
        assert shutil.which(name, path=env["PATH"]) == str(base / "no-compiler" / name)
    started = time.monotonic()
    installed = subprocess.run(
        [
            str(where / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            f"anyfill[local] @ {wheel.as_uri()}",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert not calls.exists(), calls.read_text()  # nothing tried to compile
    print(f"pip install anyfill[local]: {time.monotonic() - started:.1f} s")
    return where


@pytest.fixture
def user(tmp_path: Path, venv: Path) -> dict[str, str]:
    """A fresh home and a PATH with the venv and the system's programs only."""
    env = private_env(tmp_path)
    env["PATH"] = f"{venv / 'bin'}:{SYSTEM_PATH}"
    assert shutil.which("llama-server", path=env["PATH"]) is None, "a llama-server is on PATH"
    assert not (tmp_path / ".cache" / "anyfill" / "llama").exists()
    return env


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """The tiny model at a path of this test's own, so its server process is told apart."""
    assert ASSETS is not None
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    shutil.copyfile(ASSETS / TINY_FIM_MODEL, path)
    return path


def runners(model: Path) -> list[int]:
    """Pids of prebuilt-runtime processes serving ``model`` (zombies excepted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if RUNNER in argv and str(model) in argv and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def anyfill(venv: Path) -> str:
    return str(venv / "bin" / "anyfill")


def test_model_use_then_a_completion_through_the_prebuilt_runtime(
    venv: Path, user: dict[str, str], model: Path, tmp_path: Path
) -> None:
    used = run([anyfill(venv), "model", "use", str(model)], user)
    assert used.returncode == 0, used.stderr
    assert f"backend 'managed' now runs {model}" in used.stdout

    doctor = run([anyfill(venv), "doctor", "--json"], user, timeout=120)
    findings = {f["topic"]: f for f in json.loads(doctor.stdout)["findings"]}
    binary = findings["backend managed binary"]
    assert binary["status"] == "ok", binary
    assert binary["detail"].startswith("the prebuilt runtime, xllamacpp ")

    document = tmp_path / "doc.py"
    document.write_text("def add(a, b):\n    return <|cursor|>\n")
    done = run([anyfill(venv), "complete", str(document), "--backend", "managed", "--json"], user)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["backend"] == "managed"
    assert answer["mode"] == "native"  # llama.cpp's /infill, as with llama-server
    assert answer["usage"]["completion_tokens"] > 0
    log = (
        tmp_path / ".local" / "state" / "anyfill" / "log" / "llama-server-managed.log"
    ).read_text()
    assert f"-m {RUNNER} --model {model}" in log
    assert "anyfill prebuilt runtime: xllamacpp " in log
    assert f"serving {model} at http://127.0.0.1:" in log
    assert "anyfill prebuilt runtime: stopping (SIGTERM)" in log  # stopped with the command
    assert runners(model) == []


def _status(url: str, key: str = "") -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5):
            return 200
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.desktop
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")
def test_the_daemon_supervises_the_prebuilt_runtime(
    venv: Path, user: dict[str, str], model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f"""
[[backends]]
name = "managed"
type = "llamacpp-managed"
model = "{model}"

[routing]
default = ["managed"]

[hotkeys]
complete = "<ctrl>+<alt>+<f7>"
preview = "<ctrl>+<alt>+<f8>"
cancel = "<ctrl>+<alt>+<f9>"

[logging]
level = "INFO"
"""
    )
    with XSession.start() as session:
        env = {**user, "DISPLAY": session.env["DISPLAY"]}
        log = session.workdir / "daemon.log"
        process = session.spawn(
            [anyfill(venv), "--config", str(config), "run", "--headless"], log.name, env
        )
        try:
            wait_until(lambda: len(runners(model)) == 1, 60, "the prebuilt runtime")
            first = runners(model)[0]
            wait_until(
                lambda: "managed llama-server 'managed': ready" in log.read_text(), 60, "ready"
            )
            url = log.read_text().split("serving tiny.gguf at ", 1)[1].split()[0]
            assert url.startswith("http://127.0.0.1:")
            assert _status(f"{url}/props") == 401  # only anyfill holds the key
            assert _status(f"{url}/props", "not-the-key") == 401

            os.kill(first, signal.SIGKILL)
            wait_until(lambda: runners(model) not in ([], [first]), 60, "the runtime started again")
            wait_until(lambda: log.read_text().count("': ready: serving") >= 2, 60, "ready again")
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(30)
        assert code == 0, log.read_text()
        assert runners(model) == []  # stopped with the daemon
        text = log.read_text()
        assert "llama-server exited with code -9" in text

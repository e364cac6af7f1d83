"""What ``packaging/build-bundle`` built, checked as a user would meet it: the wheel and sdist
hold every package and data file, the wheel installed alone in a fresh venv works, and the
PyInstaller bundle answers ``version`` and ``doctor --json`` and starts under Xvfb.

The build takes about two minutes on two cores, more than the default test run may spend,
so ``.ci/run`` builds it in its own step and runs this file with ``ANYFILL_BUNDLE_OUT``
pointing at the result: ``packaging/build-bundle build/ci && ANYFILL_BUNDLE_OUT=build/ci
python -m pytest tests/packaging``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from anyfill.daemon.evaluation.problems import load_problems
from tests.e2e.harness import MISSING, XSession, daemon_config, wait_until
from tests.servers.http import LoopbackServer
from tests.servers.humaneval import AnswerKey
from tests.servers.llamacpp import LlamaCpp

REPO = Path(__file__).resolve().parents[2]
OUT = os.environ.get("ANYFILL_BUNDLE_OUT", "")
# Source folder -> where the wheel puts it (pyproject.toml [tool.setuptools] package-dir).
FOLDERS = {
    "daemon": "anyfill/daemon",
    "config": "anyfill/config",
    "ui": "anyfill/ui",
    "packaging/assets": "anyfill/assets",
}
SKIP_SUFFIXES = {".pyc"}

pytestmark = [
    pytest.mark.bundle,
    pytest.mark.skipif(
        not OUT, reason="set ANYFILL_BUNDLE_OUT to packaging/build-bundle's output (.ci/run)"
    ),
]


@pytest.fixture(scope="module")
def out() -> Path:
    path = (REPO / OUT).resolve()
    assert (path / "bundle" / "anyfill" / "anyfill").is_file(), (
        f"no bundle in {path}: run packaging/build-bundle {OUT}"
    )
    return path


def source_files() -> dict[str, str]:
    """Every file a user needs, by its path in the wheel (tracked or not, caches excepted)."""
    files = {}
    for folder, target in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix in SKIP_SUFFIXES:
                continue
            relative = path.relative_to(REPO / folder).as_posix()
            files[f"{target}/{relative}"] = f"{folder}/{relative}"
    return files


def only(out: Path, pattern: str) -> Path:
    found = sorted(out.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_holds_every_package_and_data_file(out: Path) -> None:
    names = set(zipfile.ZipFile(only(out, "anyfill-*.whl")).namelist())
    missing = sorted(source for inside, source in source_files().items() if inside not in names)
    assert not missing, f"not in the wheel (pyproject.toml packages/package-data?): {missing}"
    assert "anyfill/assets/icons/hicolor/48x48/apps/anyfill.png" in names
    assert "anyfill/config/default.toml" in names


def test_the_sdist_holds_every_source_file(out: Path) -> None:
    with tarfile.open(only(out, "anyfill-*.tar.gz")) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    missing = sorted(source for source in source_files().values() if source not in names)
    assert not missing, f"not in the sdist: {missing}"
    assert {"pyproject.toml", "README.md"} <= names


def private_env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANYFILL_", "XDG_")) and key not in {"DISPLAY", "WAYLAND_DISPLAY"}
    }
    env.update(
        HOME=str(tmp_path),
        XDG_RUNTIME_DIR=str(runtime),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
    )
    return env


def run(
    argv: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def test_the_wheel_alone_in_a_fresh_venv_works(out: Path, tmp_path: Path) -> None:
    anyfill = str(out / "venv" / "bin" / "anyfill")
    env = private_env(tmp_path)
    version = run([anyfill, "version"], env)
    assert version.stdout.strip() == f"anyfill {metadata.version('anyfill')}", version.stderr
    # The icons come out of the installed wheel (importlib.resources), not this checkout.
    enabled = run([anyfill, "autostart", "enable"], env)
    assert enabled.returncode == 0, enabled.stderr
    icons = tmp_path / ".local" / "share" / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / "anyfill.svg").is_file()
    assert (icons / "256x256" / "apps" / "anyfill.png").is_file()
    entry = (tmp_path / ".config" / "autostart" / "anyfill.desktop").read_text()
    assert f"Exec={anyfill} run" in entry


def test_the_bundle_uses_the_venvs_pyside6(out: Path) -> None:
    internal = out / "bundle" / "anyfill" / "_internal"
    # The wheel's layout (PySide6/Qt/lib); a distribution's PySide6 links /usr/lib's Qt.
    assert (internal / "PySide6" / "Qt" / "lib" / "libQt6Core.so.6").is_file()
    assert (internal / "PySide6" / "Qt" / "plugins" / "platforms" / "libqxcb.so").is_file()
    assert list(internal.glob("anyfill-*.dist-info/entry_points.txt")), "metadata not copied"


def bundle(out: Path) -> str:
    return str(out / "bundle" / "anyfill" / "anyfill")


def test_the_bundle_answers_version(out: Path, tmp_path: Path) -> None:
    result = run([bundle(out), "version"], private_env(tmp_path))
    assert result.stdout.strip() == f"anyfill {metadata.version('anyfill')}", result.stderr


def test_the_bundle_answers_doctor_json(out: Path, tmp_path: Path) -> None:
    result = run([bundle(out), "doctor", "--json"], private_env(tmp_path))
    report = json.loads(result.stdout)
    topics = {finding["topic"]: finding["status"] for finding in report["findings"]}
    assert {"config", "routing", "keyring", "session", "tray", "autostart"} <= set(topics)
    assert topics["session"] == "fail"  # no display in this environment
    assert report["can_work"] is False
    assert result.returncode == report["exit_code"] == 1


def test_the_bundle_installs_its_launcher_and_autostart(out: Path, tmp_path: Path) -> None:
    env = private_env(tmp_path)
    result = run([bundle(out), "autostart", "enable"], env)
    assert result.returncode == 0, result.stderr
    entry = (tmp_path / ".config" / "autostart" / "anyfill.desktop").read_text()
    assert f"Exec={bundle(out)} run" in entry  # the bundle's own executable
    launcher = (tmp_path / ".local" / "share" / "applications" / "anyfill.desktop").read_text()
    assert f"Exec={bundle(out)} run" in launcher
    icons = tmp_path / ".local" / "share" / "icons" / "hicolor"
    assert (icons / "48x48" / "apps" / "anyfill.png").is_file()  # from the bundle's data
    status = json.loads(run([bundle(out), "autostart", "status", "--json"], env).stdout)
    assert status["enabled"] is True


@pytest.mark.desktop
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")
@pytest.mark.parametrize("headless", [True, False], ids=["headless", "with-ui"])
def test_the_bundle_starts_under_xvfb(out: Path, tmp_path: Path, headless: bool) -> None:
    with LoopbackServer.in_thread(LlamaCpp()) as server, XSession.start() as session:
        config = tmp_path / "config.toml"
        config.write_text(daemon_config(server.url))
        env = {**session.env, "XDG_RUNTIME_DIR": str(tmp_path / "run")}
        (tmp_path / "run").mkdir(mode=0o700)
        command = [bundle(out), "--config", str(config), "run"]
        started = time.monotonic()
        process = session.spawn([*command, "--headless"] if headless else command, "b.log", env)
        try:

            def status() -> dict[str, object] | None:
                if process.poll() is not None:
                    raise AssertionError((session.workdir / "b.log").read_text())
                result = run([bundle(out), "status", "--json"], env, timeout=20)
                return json.loads(result.stdout) if result.returncode == 0 else None

            answer = wait_until(status, 60, "the bundle's daemon")
            ready = time.monotonic() - started
            print(f"bundle {'headless' if headless else 'with ui'}: ready in {ready:.2f} s")
            tray = any(e.name == "tray" for e in metadata.entry_points(group="anyfill.frontends"))
            if not headless and tray:
                assert answer.get("ui"), answer  # the bundled PySide6 tray is up
            elif not headless:
                assert "tray" in (session.workdir / "b.log").read_text()
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(20)
        assert code == 0, (session.workdir / "b.log").read_text()


@pytest.mark.desktop
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")
def test_the_bundles_qt_draws_a_window_under_xvfb(out: Path, tmp_path: Path) -> None:
    """The settings panel (a Qt front end found through its entry point) opens from the
    bundle: its PySide6, plugins and metadata were all collected."""
    if not any(e.name == "settings" for e in metadata.entry_points(group="anyfill.frontends")):
        pytest.skip("no Qt front end in this tree")
    with XSession.start() as session:
        env = {**session.env, "XDG_RUNTIME_DIR": str(tmp_path / "run")}
        (tmp_path / "run").mkdir(mode=0o700)
        panel = session.spawn([bundle(out), "settings"], "settings.log", env)
        try:

            def window() -> str:
                if panel.poll() is not None:
                    raise AssertionError((session.workdir / "settings.log").read_text())
                found = subprocess.run(
                    ["xdotool", "search", "--onlyvisible", "--name", "anyfill"],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                return found.stdout.strip()

            wid = wait_until(window, 30, "the bundle's settings window")
            name = session.run("xdotool", "getwindowname", wid.splitlines()[0]).strip()
        finally:
            os.killpg(panel.pid, signal.SIGTERM)
            panel.wait(20)
    assert "anyfill" in name


def test_the_wheel_runs_eval_from_its_own_data(out: Path, tmp_path: Path) -> None:
    """``anyfill eval`` reads the HumanEval files shipped in the wheel (package data), not
    this checkout's, and their licence is installed beside them."""
    venv = out / "venv"
    licence = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from importlib import resources; print(resources.files("
            "'anyfill.daemon.evaluation').joinpath('data', 'LICENSE').read_text())",
        ],
        private_env(tmp_path),
    )
    assert "MIT License" in licence.stdout, licence.stderr
    with LoopbackServer.in_thread(AnswerKey(load_problems("single-line", 5))) as srv:
        config = tmp_path / "anyfill.toml"
        config.write_text(
            f'[[backends]]\nname = "box"\ntype = "llamacpp"\nurl = "{srv.url}"\n'
            '[routing]\ndefault = ["box"]\n[logging]\nfile = false\n'
        )
        env = {**private_env(tmp_path), "ANYFILL_CONFIG": str(config), "PYTHONPATH": ""}
        result = run(
            [str(venv / "bin" / "anyfill"), "eval", "--limit", "5", "--execute", "--json"], env
        )
    assert result.returncode == 0, result.stderr
    (box,) = json.loads(result.stdout)["backends"]
    assert (box["answered"], box["exact_match"], box["pass_at_1"]) == (5, 100.0, 100.0)

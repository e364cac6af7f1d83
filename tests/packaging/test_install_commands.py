"""The README's install commands, run as written (issue #25): ``pipx install .`` from a
checkout, ``pipx inject anyfill xllamacpp`` for the prebuilt runtime, a git URL
(``git+file://`` of this checkout: the same clone-and-build path as ``git+https://``), and
``pip wheel --no-deps -w dist .``.
The wheel itself (``pip install dist/anyfill-*.whl``, with and without ``[local]``) is
checked by test_bundle.py and test_local_extra.py.

Each install takes 15-20 s with a warm pip cache, so like the rest of tests/packaging this
runs in its own step of ``.ci/run`` (``ANYFILL_BUNDLE_OUT`` set).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.test_bundle import OUT, REPO, private_env, run

pytestmark = [
    pytest.mark.bundle,
    pytest.mark.skipif(
        not OUT, reason="set ANYFILL_BUNDLE_OUT to packaging/build-bundle's output (.ci/run)"
    ),
]


def _version() -> str:
    from importlib import metadata

    return f"anyfill {metadata.version('anyfill')}"


def test_pipx_install_from_the_checkout_then_inject_the_runtime(tmp_path: Path) -> None:
    env = private_env(tmp_path)
    env.update(
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin",
    )
    pipx = [sys.executable, "-m", "pipx"]
    installed = run([*pipx, "install", str(REPO)], env, timeout=600)
    assert installed.returncode == 0, installed.stderr
    anyfill = str(tmp_path / "bin" / "anyfill")
    assert run([anyfill, "version"], env).stdout.strip() == _version()

    injected = run([*pipx, "inject", "anyfill", "xllamacpp"], env, timeout=600)
    assert injected.returncode == 0, injected.stderr
    doctor = run([anyfill, "doctor", "--json"], env, timeout=120)
    findings = {f["topic"]: f for f in json.loads(doctor.stdout)["findings"]}
    assert findings["backend managed binary"]["detail"].startswith(
        "the prebuilt runtime, xllamacpp "
    ), findings["backend managed binary"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pip_install_from_a_git_url(tmp_path: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = private_env(tmp_path)
    env["PATH"] = f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    installed = run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"git+{REPO.as_uri()}"],
        env,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    assert run([str(venv / "bin" / "anyfill"), "version"], env).stdout.strip() == _version()


def test_pip_wheel_builds_the_wheel_the_readme_names(tmp_path: Path) -> None:
    from importlib import metadata

    built = run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        private_env(tmp_path),
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    name = f"anyfill-{metadata.version('anyfill')}-py3-none-any.whl"
    assert [p.name for p in tmp_path.glob("*.whl")] == [name]
    assert f"dist/{name}" in (REPO / "README.md").read_text()

"""The AT-SPI session's promise, against a real accessibility bus (a private D-Bus
session with at-spi-bus-launcher and the registry it starts; no display): every libatspi
call runs on the one AT-SPI thread, one at a time, whoever calls; and libatspi's objects
are released on that thread too (the last reference dropped anywhere else runs libatspi's
dispose there), also when the work fails or tries to hand one out.

The session runs in a child process (tests/unit/atspi/session_probe.py): libatspi
connects once per process and keeps that connection."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.atspi import session_probe

BUS_LAUNCHER = Path("/usr/libexec/at-spi-bus-launcher")
ROOT = Path(__file__).resolve().parents[3]
SESSION_THREAD = "anyfill-atspi"
"""The session's thread's name prefix (ThreadPoolExecutor's thread_name_prefix)."""


def _missing() -> str:
    try:
        import gi  # type: ignore[import-untyped, import-not-found, unused-ignore]

        gi.require_version("Atspi", "2.0")
        from gi.repository import Atspi  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
    except (ImportError, ValueError):
        return "PyGObject and gir1.2-atspi-2.0"
    if not BUS_LAUNCHER.exists() or not shutil.which("dbus-daemon") or not shutil.which("gdbus"):
        return "at-spi2-core and dbus-daemon (Debian)"
    return ""


MISSING = _missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")


@pytest.fixture(scope="module")
def a11y_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a private session bus whose accessibility bus is up."""
    runtime = tmp_path_factory.mktemp("run")
    runtime.chmod(0o700)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "AT_SPI_BUS_ADDRESS", "DBUS_SESSION_BUS_ADDRESS")
    }
    env["XDG_RUNTIME_DIR"] = str(runtime)
    started = subprocess.run(
        ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    address, pid = started.stdout.split()[:2]
    env["DBUS_SESSION_BUS_ADDRESS"] = address
    launcher = subprocess.Popen(
        [str(BUS_LAUNCHER), "--launch-immediately"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_the_a11y_bus(env)
        yield env
    finally:
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)


def _wait_for_the_a11y_bus(env: dict[str, str]) -> None:
    ask = ["gdbus", "call", "--session", "--dest", "org.a11y.Bus", "--object-path"]
    ask += ["/org/a11y/bus", "--method", "org.a11y.Bus.GetAddress"]
    deadline = time.monotonic() + 60
    while True:
        answer = subprocess.run(
            ask, env=env, capture_output=True, text=True, timeout=30, check=False
        )
        if answer.returncode == 0:
            return
        assert time.monotonic() < deadline, f"no accessibility bus: {answer.stderr}"
        time.sleep(0.2)


def probe(case: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", session_probe.__name__, case],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_every_call_runs_on_the_one_atspi_thread_one_at_a_time(a11y_env: dict[str, str]) -> None:
    seen = probe("threads", a11y_env)
    assert seen["failures"] == []
    works = seen["works"]
    calls = session_probe.LOOP_CALLS + session_probe.THREADS * session_probe.THREAD_CALLS
    assert len(works) == calls
    # The registry answered every work: libatspi was really called.
    assert {tuple(w["desktop"][:2]) for w in works} == {("main", True)}
    threads = {w["thread"] for w in works}
    assert len(threads) == 1
    assert threads.isdisjoint(seen["callers"])
    assert len(seen["callers"]) == 1 + session_probe.THREADS
    assert all(w["name"].startswith(SESSION_THREAD) for w in works)
    assert max(w["overlap"] for w in works) == 1


def test_libatspi_objects_are_released_on_the_atspi_thread(a11y_env: dict[str, str]) -> None:
    seen = probe("objects", a11y_env)
    (session_thread,) = seen["session"]
    assert session_thread.startswith(SESSION_THREAD)
    assert seen["finalized"] == {
        "raised on the loop": [session_thread],
        "raised in a thread": [session_thread],
        "returned": [session_thread],
    }
    assert seen["outcomes"] == {
        "raised on the loop": "LookupError",
        "raised in a thread": "LookupError",
        "returned": "TypeError",  # handing one out is refused
    }

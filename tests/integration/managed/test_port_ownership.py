"""The managed llama-server's port taken by another user (issue 24): the real llama-server,
the tiny FIM model, and a listener of uid ``nobody`` (``setpriv``) that plays llama-server
(``/health`` 200, ``/props`` 404, ``/infill`` answered with "stolen").

anyfill must send that listener nothing (no ``/health`` with the key, no captured text), say
the port is not its own, and, when it picked the port itself, serve from a port its child
really holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.daemon.errors import BackendUnavailable
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
from anyfill.daemon.managed.supervisor import free_port
from tests.integration.managed.test_managed_real import ASSETS, _request, _settings
from tests.llm.server import SKIP_REASON

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(ASSETS is None, reason=SKIP_REASON),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="a second uid needs root and setpriv",
    ),
]

LISTENER = Path(__file__).with_name("foreign_listener.py")
SYSTEM_PYTHON = "/usr/bin/python3"


class Foreign:
    """The other user's listener: a process of uid nobody, its request log on stdout."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             SYSTEM_PYTHON, "-c", LISTENER.read_text(), *args],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.lines: list[str] = []

    def wait_listening(self) -> int:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        self.lines.append(line)
        assert line.startswith("listening "), line
        return int(line.split()[1])

    def stop(self) -> list[str]:
        """Every line it printed: 'listening N' or 'bind failed ...', then its requests."""
        self.process.terminate()
        out, _ = self.process.communicate(timeout=10)
        self.lines += out.splitlines()
        return [line.strip() for line in self.lines if line.strip()]

    def requests(self) -> list[str]:
        return [line for line in self.stop() if line.startswith("request ")]


def _has_prebuilt() -> bool:
    import importlib.util

    return importlib.util.find_spec("xllamacpp") is not None


@pytest.fixture(params=["llama-server", "prebuilt"])
def runtime(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, str]:
    """``server`` options for the compiled llama-server, or for the prebuilt runtime (the
    ``local`` extra's xllamacpp, which the test venv lacks: put its wheel on PYTHONPATH)."""
    if request.param == "llama-server":
        return {}
    if not _has_prebuilt():
        pytest.skip("xllamacpp is not installed (pip install --target DIR xllamacpp; PYTHONPATH)")
    # No llama-server on PATH nor in anyfill's build cache: the prebuilt one runs.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ANYFILL_LLAMA_CACHE", str(tmp_path / "no-build"))
    return {"binary": ""}


@pytest.fixture
def foreign_on_a_port() -> Iterator[tuple[Foreign, int]]:
    foreign = Foreign(str(free_port()))
    try:
        port = foreign.wait_listening()
        yield foreign, port
    finally:
        if foreign.process.poll() is None:
            foreign.stop()


def test_the_listener_is_another_uid_and_the_check_sees_it(
    foreign_on_a_port: tuple[Foreign, int],
) -> None:
    from anyfill.daemon.managed.ownership import port_owner

    _, port = foreign_on_a_port
    # Judged against a child of ours that holds no socket (the test process itself is the
    # listener's grandparent, so it would count the listener as its own family).
    with subprocess.Popen(["sleep", "30"]) as child:
        owner = port_owner(port, child.pid)
        child.kill()
    assert owner.verdict == "other"
    assert owner.uids == (65534,)
    # The kernel's socket diagnostics and /proc/net (the fallback) see the same listener.
    from anyfill.daemon.managed.ownership import _diag_listeners, _proc_listeners

    assert _diag_listeners(port) == _proc_listeners(port, Path("/proc"))
    assert [uid for _, uid in _diag_listeners(port)] == [65534]
    assert port_owner(free_port(), os.getpid()).verdict == "nobody"


async def test_a_fixed_port_held_by_another_user_gets_nothing_and_is_named(
    foreign_on_a_port: tuple[Foreign, int], tmp_path: Path, runtime: dict[str, str]
) -> None:
    foreign, port = foreign_on_a_port
    from anyfill.daemon.engine.engine import Engine

    async with Engine(_settings(url=f"http://127.0.0.1:{port}", **runtime)) as engine:
        backend = engine.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = tmp_path
        with pytest.raises(BackendUnavailable) as info:
            await engine.complete(_request())
        message = str(info.value)
    assert f"port {port} (backends.managed.url) is taken by another program" in message
    assert "a program anyfill did not start listens there (uid 65534)" in message
    assert "anyfill sent it nothing" in message
    assert foreign.requests() == []  # no /health with the key, no /props, no text


async def test_a_picked_port_taken_first_is_left_and_another_one_serves(
    foreign_on_a_port: tuple[Foreign, int], tmp_path: Path, runtime: dict[str, str]
) -> None:
    """The race the issue saw won 1 time in 5, made certain: the port anyfill picks is
    bound by the other user before llama-server starts."""
    foreign, port = foreign_on_a_port
    from anyfill.daemon.engine.engine import Engine

    ports = iter([port])
    async with Engine(_settings(**runtime)) as engine:
        backend = engine.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = tmp_path
        backend.supervisor.pick_port = lambda: next(ports, None) or free_port()
        done = await engine.complete(_request())
        assert done.backend == "managed"
        assert "stolen" not in done.middle
        assert backend.supervisor.url != f"http://127.0.0.1:{port}"
        started = (tmp_path / "llama-server-managed.log").read_text(errors="replace")
        assert ("anyfill.daemon.managed.prebuilt_server" in started) == bool(runtime)

        child = backend.supervisor.process
        assert child is not None
        from anyfill.daemon.managed.ownership import port_owner

        assert port_owner(int(backend.supervisor.url.rsplit(":", 1)[1]), child.pid).verdict == (
            "ours"
        )
    assert foreign.requests() == []


async def test_an_attacker_racing_for_the_port_from_the_process_list_gets_nothing(
    tmp_path: Path,
) -> None:
    """The real race, five starts: the other user scans the process list for the managed
    server's --port and binds it at once. Whoever wins, it receives nothing."""
    from anyfill.daemon.engine.engine import Engine

    won = 0
    for run in range(5):
        foreign = Foreign("--watch")
        try:
            async with Engine(_settings()) as engine:
                backend = engine.backends["managed"]
                assert isinstance(backend, ManagedLlamaCppBackend)
                backend.supervisor.logs = tmp_path / str(run)
                done = await engine.complete(_request(run))
                assert done.backend == "managed"
                assert "stolen" not in done.middle
        finally:
            lines = foreign.stop()
        assert [line for line in lines if line.startswith("request ")] == [], lines
        won += any(line.startswith("listening ") for line in lines)
    print(f"\nthe other user bound the port first in {won} of 5 starts")

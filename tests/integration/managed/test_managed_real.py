"""The managed backend with the real llama-server and the tiny FIM GGUF (tests/llm).

Start on a free port and answer natively, come back after a SIGKILL, stop with the
engine, never outlive a daemon that is killed, and survive a port clash.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import BackendUnavailable
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.managed.prestart import start_managed_servers
from tests.llm.server import (
    SERVER_BINARY,
    SKIP_REASON,
    TINY_FIM_MODEL,
    LlamaServer,
    find_assets,
)

ASSETS = find_assets()
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(ASSETS is None, reason=SKIP_REASON),
]

HERE = Path(__file__).parent


def _settings(**server: object) -> Settings:
    assert ASSETS is not None
    url = server.pop("url", None)
    config: dict[str, object] = {
        "name": "managed",
        "type": "llamacpp-managed",
        "model": str(ASSETS / TINY_FIM_MODEL),
        "max_tokens": 8,
        "server": {"binary": str(ASSETS / SERVER_BINARY), "context_size": 1024, **server},
    }
    if url:
        config["url"] = url
    return Settings(
        backends=[BackendConfig.model_validate(config)],
        routing=RoutingConfig(default=["managed"]),
    )


def _request(n: int = 0) -> CompletionRequest:
    context = Context(prefix=f"def add_{n}(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n")
    return CompletionRequest(id=f"r{n}", context=context, max_tokens=6)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _safe_cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


async def _wait_until(predicate: object, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[tuple[Engine, ManagedLlamaCppBackend, EventBus]]:
    bus = EventBus()
    async with Engine(_settings(), bus=bus) as engine:
        backend = engine.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = tmp_path / "logs"
        yield engine, backend, bus


async def test_starts_on_a_free_port_and_answers_natively(
    engine: tuple[Engine, ManagedLlamaCppBackend, EventBus], tmp_path: Path
) -> None:
    eng, backend, bus = engine
    events = bus.subscribe(ManagedServerChanged)

    completion = await eng.complete(_request())

    assert completion.backend == "managed"
    assert completion.plan.mode == "native"  # /infill with the model's own FIM tokens
    assert completion.raw  # the tiny model always answers (gibberish, never pinned)
    supervisor = backend.supervisor
    assert supervisor.state == "ready"
    host, port = supervisor.url.removeprefix("http://").split(":")
    assert host == "127.0.0.1"
    assert int(port) > 0
    states = [events.get_nowait().state for _ in range(2)]
    assert states == ["starting", "ready"]
    assert supervisor.process is not None
    cmdline = _cmdline(supervisor.process.pid)
    assert cmdline[cmdline.index("--host") + 1] == "127.0.0.1"
    log = _read(tmp_path / "logs" / "llama-server-managed.log")
    assert "anyfill starts:" in log
    assert "server is listening" in log or "listening" in log  # llama-server's own output


async def test_a_killed_server_comes_back(
    engine: tuple[Engine, ManagedLlamaCppBackend, EventBus],
) -> None:
    eng, backend, bus = engine
    await eng.complete(_request(1))
    supervisor = backend.supervisor
    assert supervisor.process is not None
    first_pid = supervisor.process.pid
    events = bus.subscribe(ManagedServerChanged)

    os.kill(first_pid, signal.SIGKILL)
    await _wait_until(lambda: supervisor.starts == 2 and supervisor.state == "ready")

    assert supervisor.process is not None
    assert supervisor.process.pid != first_pid
    assert not _alive(first_pid)
    seen = []
    while True:
        try:
            seen.append(events.get_nowait())
        except asyncio.QueueEmpty:
            break
    assert [e.state for e in seen] == ["restarting", "starting", "ready"]
    assert "exited with code -9" in seen[0].detail
    completion = await eng.complete(_request(2))
    assert completion.backend == "managed"
    assert completion.raw


@pytest.mark.parametrize("tie", ["pdeathsig", "pipe"])
async def test_the_engine_stops_its_server(tmp_path: Path, tie: str) -> None:
    async with Engine(_settings()) as eng:
        backend = eng.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = tmp_path
        backend.supervisor.tie = tie  # type: ignore[assignment]
        completion = await eng.complete(_request())
        assert completion.plan.mode == "native"
        assert backend.supervisor.process is not None
        pid = backend.supervisor.process.pid
        pids = [pid, *_children(pid)]  # with the guard: the guard and the server
        assert len(pids) == (2 if tie == "pipe" else 1)
        assert all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)
    assert backend.supervisor.state == "stopped"


@pytest.mark.parametrize(
    ("sig", "tie"),
    [(signal.SIGKILL, "pdeathsig"), (signal.SIGTERM, "pdeathsig"), (signal.SIGKILL, "pipe")],
)
def test_a_killed_daemon_leaves_no_server(tmp_path: Path, sig: signal.Signals, tie: str) -> None:
    """SIGKILL gives the daemon no chance to clean up; the kernel's parent-death signal
    takes the server down with it (SIGTERM on a process without handlers is the same). The
    guard used where there is no such signal (macOS, Windows) sees its pipe close instead."""
    assert ASSETS is not None
    daemon = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "daemon_child.py"),
            str(ASSETS / SERVER_BINARY),
            str(ASSETS / TINY_FIM_MODEL),
            str(tmp_path),
            tie,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    server_pid = 0
    try:
        assert daemon.stdout is not None
        server_pid = int(daemon.stdout.readline())
        assert _alive(server_pid)
        daemon.send_signal(sig)
        daemon.wait(10)
        deadline = time.monotonic() + 10
        while _alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server_pid), "llama-server outlived the daemon"
    finally:
        daemon.kill()
        daemon.wait()
        if daemon.stdout is not None:
            daemon.stdout.close()
        if server_pid and _alive(server_pid):  # a failed test leaves no server behind either
            os.kill(server_pid, signal.SIGKILL)


def _held_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def test_a_port_taken_in_between_is_replaced_by_another(tmp_path: Path) -> None:
    with _held_port() as holder:
        taken = holder.getsockname()[1]
        ports = iter([taken])

        def pick() -> int:
            from anyfill.daemon.managed.supervisor import free_port

            return next(ports, None) or free_port()

        settings = _settings()
        async with Engine(settings) as eng:
            backend = eng.backends["managed"]
            assert isinstance(backend, ManagedLlamaCppBackend)
            backend.supervisor.logs = tmp_path
            backend.supervisor.pick_port = pick
            completion = await eng.complete(_request())
            assert completion.backend == "managed"
            assert backend.supervisor.url != f"http://127.0.0.1:{taken}"
    log = _read(tmp_path / "llama-server-managed.log")
    assert f"--port {taken}" in log
    assert "couldn't bind" in log


async def test_a_configured_port_that_is_taken_is_a_clear_error(tmp_path: Path) -> None:
    with _held_port() as holder:
        taken = holder.getsockname()[1]
        settings = _settings(url=f"http://127.0.0.1:{taken}")
        async with Engine(settings) as eng:
            backend = eng.backends["managed"]
            assert isinstance(backend, ManagedLlamaCppBackend)
            backend.supervisor.logs = tmp_path
            with pytest.raises(BackendUnavailable, match=f"port {taken} .* is taken"):
                await backend.supervisor.ready_url(30)


def _chain(first_url: str) -> Settings:
    managed = _settings().backends[0]
    mine = BackendConfig(name="llamacpp", type="llamacpp", url=first_url, max_tokens=8)
    return Settings(
        backends=[mine, managed], routing=RoutingConfig(default=["llamacpp", "managed"])
    )


async def test_with_no_server_of_their_own_a_user_gets_the_managed_one(
    tmp_path: Path, refused_url: str
) -> None:
    settings = _chain(refused_url)
    async with Engine(settings) as eng:
        backend = eng.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = tmp_path
        await start_managed_servers(eng.backends, settings)  # what the daemon does at start
        # Started before any request asked for it:
        await _wait_until(lambda: backend.supervisor.state == "ready")
        completion = await eng.complete(_request())
        assert completion.backend == "managed"


async def test_a_user_with_a_server_keeps_it_and_nothing_is_started(tmp_path: Path) -> None:
    assert ASSETS is not None
    with LlamaServer(ASSETS / TINY_FIM_MODEL, ctx_size=1024) as theirs:
        settings = _chain(theirs.url)
        async with Engine(settings) as eng:
            backend = eng.backends["managed"]
            assert isinstance(backend, ManagedLlamaCppBackend)
            backend.supervisor.logs = tmp_path
            await start_managed_servers(eng.backends, settings)
            completion = await eng.complete(_request())
            assert completion.backend == "llamacpp"
            assert backend.supervisor.state == "stopped"
            assert backend.supervisor.process is None
    assert not (tmp_path / "llama-server-managed.log").exists()


def test_anyfill_complete_falls_back_to_the_managed_server(tmp_path: Path) -> None:
    """A user with no server: `anyfill complete` with the default chain answers from the
    managed server, and leaves no llama-server behind when it exits."""
    import os as _os

    from tests.unit.foundation.test_cli import run

    assert ASSETS is not None
    home = {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
        "PATH": f"{ASSETS}:{_os.environ['PATH']}",  # llama-server as if installed
    }
    with _held_port() as nothing_here:  # the user's :8080 and :11434 stand-ins: refused
        refused = f"http://127.0.0.1:{nothing_here.getsockname()[1]}"
    home["ANYFILL_BACKENDS__LLAMACPP__URL"] = refused
    home["ANYFILL_BACKENDS__OLLAMA__URL"] = refused
    assert run("model", "use", str(ASSETS / TINY_FIM_MODEL), env=home).returncode == 0
    doc = tmp_path / "doc.py"
    doc.write_text("def add(a, b):\n    return <|cursor|>\n")

    result = run("complete", str(doc), "--json", "--max-tokens", "6", env=home)

    assert result.returncode == 0, result.stderr
    assert '"backend": "managed"' in result.stdout
    assert '"mode": "native"' in result.stdout
    log = _read(tmp_path / "state" / "anyfill" / "log" / "llama-server-managed.log")
    assert "anyfill starts:" in log
    # The key file's path is unique to this run's server: find any process still using it.
    key_file = log.split("--api-key-file ", 1)[1].split()[0]
    left = [
        proc.name
        for proc in Path("/proc").iterdir()
        if proc.name.isdigit() and _alive(int(proc.name)) and key_file in _safe_cmdline(proc)
    ]
    assert left == []
    assert not Path(key_file).exists()  # the key left with the server


async def test_a_server_that_stops_answering_is_killed_and_started_again(
    engine: tuple[Engine, ManagedLlamaCppBackend, EventBus],
) -> None:
    eng, backend, bus = engine
    supervisor = backend.supervisor
    supervisor.health_every_s = 0.2  # the defaults (10 s, 5 s, 3 misses) shortened
    supervisor.health_timeout_s = 0.3
    supervisor.health_misses = 2
    await eng.complete(_request(1))
    assert supervisor.process is not None
    hung = supervisor.process.pid
    events = bus.subscribe(ManagedServerChanged)

    os.kill(hung, signal.SIGSTOP)  # alive, holding its port, answering nothing
    try:
        await _wait_until(lambda: supervisor.starts == 2 and supervisor.state == "ready")
    finally:
        if _alive(hung):
            os.kill(hung, signal.SIGKILL)

    assert not _alive(hung)
    restarting = events.get_nowait()
    assert restarting.state == "restarting"
    assert "stopped answering /health (2 checks), so it was killed" in restarting.detail
    completion = await eng.complete(_request(2))
    assert completion.backend == "managed"

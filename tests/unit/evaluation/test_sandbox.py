"""The sandbox ``anyfill eval --execute`` runs generated programs in (real subprocesses)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from anyfill.daemon.evaluation.sandbox import Sandbox, network_namespace_prefix

# A limit far above a program's run: a child Python starting on the shared 2-core machine at
# load 14 took over 2 s, and "timed out" is not what these tests are about.
HOOK_ONLY = Sandbox(time_limit_s=60, network_namespace=False)
BOTH = Sandbox(time_limit_s=60)


async def test_passing_and_failing_programs() -> None:
    assert (await HOOK_ONLY.run("assert sum([1, 2]) == 3\n")).outcome == "passed"
    failed = await HOOK_ONLY.run("assert 1 == 2, 'nope'\n")
    assert failed.outcome == "failed"
    assert failed.detail == "AssertionError: nope"


async def test_an_endless_loop_is_killed_at_the_time_limit() -> None:
    verdict = await Sandbox(time_limit_s=0.5, network_namespace=False).run("while True:\n pass\n")
    assert verdict.outcome == "timed out"
    assert verdict.detail == "killed after 0.5 s"


async def test_a_sleeping_child_is_killed_too() -> None:
    verdict = await Sandbox(time_limit_s=0.5, network_namespace=False).run(
        "import time\ntime.sleep(60)\n"
    )
    assert verdict.outcome == "timed out"


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    return server


CONNECT = "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n"


def test_the_connect_program_reaches_the_listener_outside_the_sandbox(tmp_path: Path) -> None:
    """The control: the very program connects when run plainly, so a failure inside the
    sandbox is the sandbox's doing."""
    with _listener() as server:
        program = CONNECT.format(port=server.getsockname()[1])
        run = subprocess.run([sys.executable, "-c", program], timeout=30, check=False)
        assert run.returncode == 0
        server.accept()[0].close()


@pytest.mark.parametrize("sandbox", [HOOK_ONLY, BOTH], ids=["audit-hook", "hook+namespace"])
async def test_the_network_is_refused(sandbox: Sandbox) -> None:
    with _listener() as server:
        verdict = await sandbox.run(CONNECT.format(port=server.getsockname()[1]))
        assert verdict.outcome == "failed"
        assert "socket" in verdict.detail
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected


async def test_the_c_level_socket_module_is_refused_too() -> None:
    verdict = await HOOK_ONLY.run("import _socket\n_socket.socket()\n")
    assert verdict.outcome == "failed"
    assert "socket.__new__ is not allowed" in verdict.detail


@pytest.mark.skipif(not network_namespace_prefix(), reason="no user+network namespace here")
async def test_in_the_namespace_only_loopback_exists() -> None:
    """The second layer: the child's own network namespace (what /proc/self/net shows)
    has no interface but ``lo``, which a new namespace leaves down."""
    verdict = await BOTH.run(
        "lines = open('/proc/self/net/dev').read().splitlines()[2:]\n"
        "names = [line.split(':')[0].strip() for line in lines]\n"
        "assert names == ['lo'], names\n"
    )
    assert verdict.outcome == "passed", verdict.detail


async def test_writes_outside_the_scratch_directory_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    verdict = await HOOK_ONLY.run(f"open({str(target)!r}, 'w').write('x')\n")
    assert verdict.outcome == "failed"
    assert "not allowed" in verdict.detail
    assert not target.exists()
    # Its own scratch directory is writable (and removed afterwards).
    assert (await HOOK_ONLY.run("open('here.txt', 'w').write('x')\n")).outcome == "passed"


async def test_subprocesses_are_refused() -> None:
    verdict = await HOOK_ONLY.run("import os\nos.system('true')\n")
    assert verdict.outcome == "failed"
    assert "os.system is not allowed" in verdict.detail


async def test_memory_is_limited() -> None:
    verdict = await Sandbox(time_limit_s=60, memory_bytes=512 * 2**20).run(
        "x = bytearray(1024 * 2**20)\n"
    )
    assert verdict.outcome == "failed"
    assert verdict.detail == "MemoryError"

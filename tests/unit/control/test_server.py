"""The control server on a real Unix socket: answers, bad input, stale and live sockets,
file modes, and other users. Clients are the real stdlib client or raw sockets, run in a
thread so the server's loop keeps turning."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from anyfill.daemon import runtime_dir as paths
from anyfill.daemon.control.client import call
from anyfill.daemon.control.commands import CommandError, Commands
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.errors import AlreadyRunning, CommandRefused, ControlError, NotRunning

ROOT = os.geteuid() == 0
NOBODY = 65534


def echo_commands() -> Commands:
    commands = Commands()
    commands.register("echo", lambda args: {"echo": args})

    async def slow(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"slept": True}

    def refuse(args: dict[str, Any]) -> None:
        raise CommandError("not today", "bad-args")

    def crash(args: dict[str, Any]) -> None:
        raise RuntimeError("a bug in a handler")

    commands.register("slow", slow)
    commands.register("refuse", refuse)
    commands.register("crash", crash)
    commands.register("nothing", lambda args: None)
    return commands


def raw(path: str, data: bytes, *, shut: bool = False) -> dict[str, Any]:
    """Send ``data`` as is; the decoded answer line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        answer = sock.makefile("rb").readline()
    return dict(json.loads(answer))


def write(path: str, text: str) -> None:
    Path(path).write_text(text)


def read(path: str) -> str:
    return Path(path).read_text()


async def in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(function, *args, **kwargs)


async def test_a_command_round_trip_through_the_client(runtime: Path) -> None:
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        assert server.path == str(runtime / "anyfill" / "control.sock")
        assert await in_thread(call, "echo", {"a": [1, "ü"]}) == {"echo": {"a": [1, "ü"]}}
        assert await in_thread(call, "slow") == {"slept": True}
        assert await in_thread(call, "nothing") == {}


async def test_socket_is_0600_in_a_0700_directory_and_gone_after_close(runtime: Path) -> None:
    old = os.umask(0)  # even a permissive umask gives private modes
    try:
        async with ControlServer(echo_commands()) as server:
            path = server.path
            assert stat.S_ISSOCK(os.lstat(path).st_mode)
            assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
            assert stat.S_IMODE(os.lstat(os.path.dirname(path)).st_mode) == 0o700
    finally:
        os.umask(old)
    with pytest.raises(FileNotFoundError):
        os.lstat(path)


async def test_errors_are_answers_and_the_server_keeps_serving(runtime: Path) -> None:
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        with pytest.raises(CommandRefused) as refused:
            await in_thread(call, "refuse")
        assert (refused.value.code, str(refused.value)) == ("bad-args", "not today")
        with pytest.raises(CommandRefused) as crashed:
            await in_thread(call, "crash")
        assert crashed.value.code == "internal"
        assert "a bug in a handler" in str(crashed.value)
        with pytest.raises(CommandRefused) as unknown:
            await in_thread(call, "show-settings")
        assert unknown.value.code == "unknown-command"
        assert "known: crash, echo, nothing, refuse, slow" in str(unknown.value)
        assert await in_thread(call, "echo") == {"echo": {}}


BAD_INPUT = {
    "not JSON": (b"hello\n", "bad-json"),
    "not UTF-8": (b"\xff\xfe{}\n", "bad-json"),
    "an array": (b"[1, 2]\n", "bad-request"),
    "no command": (b'{"v": 1}\n', "bad-request"),
    "command not a string": (b'{"cmd": 5}\n', "bad-request"),
    "args not an object": (b'{"cmd": "echo", "args": [1]}\n', "bad-request"),
    "version not a number": (b'{"v": "1", "cmd": "echo"}\n', "bad-request"),
    "version from the future": (b'{"v": 99, "cmd": "echo"}\n', "unsupported-version"),
    "empty line": (b"\n", "bad-request"),
    "nested too deep": (b"[" * 60_000 + b"\n", "bad-json"),
    "an integer of 5000 digits": (b'{"cmd": "echo", "v": ' + b"9" * 5000 + b"}\n", "bad-json"),
    # Larger than the socket buffers, so the client is still sending when the server answers
    # (the server must read the rest, or the client's send fails with EPIPE).
    "huge line": (b'{"cmd": "echo", "args": {"x": "' + b"y" * 3_000_000 + b'"}}\n', "too-long"),
    "huge line without newline": (b"z" * 3_000_000, "too-long"),
}


@pytest.mark.parametrize("case", BAD_INPUT, ids=list(BAD_INPUT))
async def test_bad_input_gets_an_error_answer(case: str, runtime: Path) -> None:
    data, code = BAD_INPUT[case]
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        answer = await in_thread(raw, server.path, data)
        assert answer["v"] == 1
        assert answer["ok"] is False
        assert answer["error"]["code"] == code
        assert answer["error"]["message"]
        # And the next client is served as usual.
        assert await in_thread(call, "echo", {"after": case}) == {"echo": {"after": case}}


async def test_a_request_without_a_trailing_newline_is_answered(runtime: Path) -> None:
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        answer = await in_thread(raw, server.path, b'{"cmd": "echo"}', shut=True)
        assert answer == {"v": 1, "ok": True, "result": {"echo": {}}}


async def test_a_missing_version_is_version_1(runtime: Path) -> None:
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        answer = await in_thread(raw, server.path, b'{"cmd": "echo", "args": {"k": 1}}\n')
        assert answer["result"] == {"echo": {"k": 1}}


async def test_a_silent_client_is_dropped_and_others_are_served_meanwhile(runtime: Path) -> None:
    async with ControlServer(echo_commands(), read_timeout_s=0.5) as server:
        await server.start_serving()
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(server.path)
        try:
            assert await in_thread(call, "echo") == {"echo": {}}
            silent.settimeout(10)
            line = await in_thread(silent.makefile("rb").readline)
            assert json.loads(line)["error"]["code"] == "timeout"
        finally:
            silent.close()


async def test_no_daemon_is_not_running(runtime: Path) -> None:
    with pytest.raises(NotRunning, match="anyfill is not running"):
        call("echo")
    paths.ensure_private_dir(paths.control_dir())
    with pytest.raises(NotRunning, match="start it with 'anyfill run'"):
        call("echo")


async def test_a_live_server_refuses_a_second_one(runtime: Path) -> None:
    async with ControlServer(echo_commands()) as first:
        await first.start_serving()
        with pytest.raises(AlreadyRunning, match="anyfill is already running"):
            async with ControlServer(Commands()):
                pass
        # The first one's socket was left alone.
        assert await in_thread(call, "echo") == {"echo": {}}


async def test_a_stale_socket_is_replaced(runtime: Path) -> None:
    path = paths.socket_path()
    paths.ensure_private_dir(os.path.dirname(path))
    crashed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    crashed.bind(path)  # what a killed daemon leaves: the file, nobody listening
    crashed.close()
    with pytest.raises(NotRunning):
        call("echo")
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        assert await in_thread(call, "echo") == {"echo": {}}


async def test_something_else_at_the_socket_path_is_not_deleted(runtime: Path) -> None:
    path = paths.socket_path()
    os.mkdir(os.path.dirname(path), 0o700)
    write(path, "the user's file")
    with pytest.raises(ControlError, match="is not a socket"):
        async with ControlServer(echo_commands()):
            pass
    assert read(path) == "the user's file"


async def test_closing_leaves_a_newer_daemons_socket_alone(runtime: Path) -> None:
    server = ControlServer(echo_commands())
    await server.__aenter__()
    os.unlink(server.path)
    newer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    newer.bind(server.path)
    try:
        await server.aclose()
        assert stat.S_ISSOCK(os.lstat(server.path).st_mode)
    finally:
        newer.close()


async def test_closing_ends_a_waiting_command(runtime: Path) -> None:
    started = asyncio.Event()
    commands = Commands()

    async def forever(args: dict[str, Any]) -> None:
        started.set()
        await asyncio.Event().wait()

    commands.register("forever", forever)
    server = ControlServer(commands)
    await server.__aenter__()
    await server.start_serving()
    client = asyncio.ensure_future(in_thread(call, "forever"))
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(server.aclose(), 10)
    with pytest.raises(ControlError, match="without an answer"):
        await asyncio.wait_for(client, 10)


CONNECT_AS_OTHER_USER = """
import json, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
try:
    sock.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect": type(exc).__name__}))
    sys.exit(0)
try:
    sock.sendall(b'{"v": 1, "cmd": "echo"}\\n')
except OSError:
    pass  # the refusal may come (and the socket close) before we send
print(sock.makefile("rb").readline().decode().strip())
"""


def as_nobody(path: str) -> dict[str, Any]:
    result = subprocess.run(
        ["/usr/bin/python3", "-c", CONNECT_AS_OTHER_USER, path],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        timeout=30,
        check=True,
        cwd="/",
    )
    return dict(json.loads(result.stdout))


@pytest.mark.skipif(not ROOT, reason="running a client as another user needs root")
async def test_another_user_cannot_reach_the_socket(runtime: Path) -> None:
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        assert await in_thread(as_nobody, server.path) == {"connect": "PermissionError"}


@pytest.mark.skipif(not ROOT, reason="running a client as another user needs root")
async def test_another_user_is_refused_even_where_the_modes_were_loosened(
    runtime: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The peer-credential check is the second lock: if someone chmods the directory and the
    socket open, a process of another user still gets only a refusal."""
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        for loosened in (str(runtime), os.path.dirname(server.path)):
            os.chmod(loosened, 0o755)
        os.chmod(server.path, 0o777)
        answer = await in_thread(as_nobody, server.path)
        assert answer["ok"] is False
        assert answer["error"]["code"] == "forbidden"
        assert "result" not in answer
        assert f"uid {NOBODY}" in caplog.text


async def test_forty_silent_connections_do_not_lock_out_status_calls(runtime: Path) -> None:
    """Same user, 40 connections that never send a line (the default limit is 32 and the
    default read timeout 5 s): every real call made meanwhile is answered."""
    async with ControlServer(echo_commands()) as server:
        await server.start_serving()
        silent: list[socket.socket] = []
        try:
            for _ in range(40):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(server.path)
                silent.append(sock)
            await asyncio.sleep(0.2)  # all accepted and waiting for their line
            answers = [await in_thread(call, "echo", {"n": n}) for n in range(20)]
            oldest = silent[0]
            oldest.settimeout(10)
            said = json.loads(await in_thread(oldest.makefile("rb").readline))
        finally:
            for sock in silent:
                sock.close()
    assert answers == [{"echo": {"n": n}} for n in range(20)]
    assert server.evicted >= 8
    assert "make room" in said["error"]["message"]  # the oldest silent one was told why


async def test_a_command_name_with_a_lone_surrogate_or_a_nul_is_logged_escaped(
    runtime: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from anyfill.daemon.log import setup_logging

    log_file = setup_logging(level="DEBUG", directory=tmp_path, stderr=False)
    assert log_file is not None
    try:
        async with ControlServer(echo_commands()) as server:
            await server.start_serving()
            for name in ("\\ud800evil", "nul\\u0000here\\u001b[2J"):
                line = b'{"cmd": "' + name.encode() + b'"}\n'
                answer = await in_thread(raw, server.path, line)
                assert answer["error"]["code"] == "unknown-command"
    finally:
        setup_logging(level="WARNING", to_file=False, stderr=False)
    written = log_file.read_bytes()
    assert b"\x00" not in written
    assert b"\x1b" not in written
    text = written.decode("utf-8")  # strict: a raw surrogate could not be in a UTF-8 file
    assert "control command \\ud800evil" in text
    assert "control command nul\\x00here\\x1b[2J" in text
    assert "Logging error" not in capsys.readouterr().err

"""The control socket's client: standard library only, because ``anyfill trigger`` runs on
every shortcut press and its start-up is most of its cost (see ``bench/bench_trigger.py``).

    from anyfill.daemon.control.client import call
    call("trigger", {"action": "complete"})   # -> {"accepted": True, "action": "complete"}

Raises :class:`NotRunning` when no daemon listens, :class:`CommandRefused` for an error
answer, :class:`ControlError` for an unsafe directory or a broken answer.
"""

from __future__ import annotations

import json
import os
import socket

from anyfill.daemon import runtime_dir
from anyfill.daemon.control import protocol
from anyfill.daemon.errors import CommandRefused, ControlError, NotRunning

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~5 ms a press)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_TIMEOUT_S = 5.0


def not_running_message(path: str) -> str:
    return f"anyfill is not running (nothing answers on {path}); start it with 'anyfill run'"


def call(
    cmd: str,
    args: dict[str, Any] | None = None,
    *,
    path: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """Send one command and return its ``result``."""
    path = path if path is not None else runtime_dir.socket_path()
    try:
        # Never talk to a socket in a directory another user controls: they could answer.
        runtime_dir.check_private_dir(os.path.dirname(path))
    except FileNotFoundError:
        raise NotRunning(not_running_message(path)) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise NotRunning(not_running_message(path)) from None
        except OSError as exc:
            raise ControlError(f"cannot connect to {path}: {exc.strerror or exc}") from exc
        try:
            try:  # noqa: SIM105 - contextlib would be one more import on every press
                sock.sendall(protocol.request(cmd, args))
            except (BrokenPipeError, ConnectionResetError):
                pass  # a refusal is sent before reading; it is still there to read
            line = _read_line(sock)
        except TimeoutError:
            raise ControlError(f"the daemon did not answer within {timeout_s:g} s") from None
        except OSError as exc:
            raise ControlError(f"the control connection broke: {exc.strerror or exc}") from exc
    finally:
        sock.close()
    return _result(line)


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or b"\n" in chunk:
            break
        if size > protocol.MAX_LINE:
            raise ControlError(f"the daemon's answer is longer than {protocol.MAX_LINE} bytes")
    return b"".join(chunks)


def _result(line: bytes) -> dict[str, Any]:
    if not line:
        raise ControlError("the daemon closed the connection without an answer")
    try:
        answer = json.loads(line.split(b"\n", 1)[0])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ControlError(f"the daemon's answer is not JSON: {exc}") from exc
    if not isinstance(answer, dict):
        raise ControlError("the daemon's answer is not a JSON object")
    result = answer.get("result")
    if answer.get("ok") is True and isinstance(result, dict):
        return result
    error = answer.get("error")
    if isinstance(error, dict):
        raise CommandRefused(str(error.get("message", "")), str(error.get("code", "")))
    raise ControlError(f"the daemon's answer has neither a result nor an error: {answer!r}")

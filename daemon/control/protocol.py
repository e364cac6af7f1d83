"""The control protocol: one JSON object per line, one request and one answer per connection.

Request::

    {"v": 1, "cmd": "trigger", "args": {"action": "complete"}}

Answer::

    {"v": 1, "ok": true, "result": {...}}
    {"v": 1, "ok": false, "error": {"code": "unknown-command", "message": "..."}}

``v`` is the protocol version. A daemon answers any request whose ``v`` is at most its own
(a missing ``v`` is 1); new fields and commands are added without raising it, so older
clients keep working. ``args`` is optional. Lines are UTF-8 and at most
:data:`MAX_LINE` bytes.

Standard library only: the client imports this on every shortcut press.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~5 ms a press)
if TYPE_CHECKING:
    from typing import Any

VERSION = 1
MAX_LINE = 64 * 1024
"""The longest request or answer line, newline included."""

# Error codes; the message says what to do, the code is for programs.
BAD_JSON = "bad-json"
BAD_REQUEST = "bad-request"
TOO_LONG = "too-long"
TIMEOUT = "timeout"
UNSUPPORTED_VERSION = "unsupported-version"
UNKNOWN_COMMAND = "unknown-command"
BAD_ARGS = "bad-args"
FAILED = "failed"
INTERNAL = "internal"
FORBIDDEN = "forbidden"


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def request(cmd: str, args: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"v": VERSION, "cmd": cmd}
    if args:
        message["args"] = args
    return encode(message)


def ok(result: dict[str, Any]) -> bytes:
    return encode({"v": VERSION, "ok": True, "result": result})


def error(code: str, message: str) -> bytes:
    return encode({"v": VERSION, "ok": False, "error": {"code": code, "message": message}})

"""A listener of another user on the managed server's port (issue 24), run as
``setpriv --reuid=nobody ... /usr/bin/python3 foreign_listener.py PORT`` (stdlib only: it
runs under the system Python, as a user that cannot read the test's virtualenv).

It plays a llama-server that answers ``/health``, says 404 to ``/props`` (which the old check
counted as "ours") and answers ``/infill`` with a completion of its own. It prints
``listening PORT`` once bound, then one line per request: method, path, and whether an
``Authorization`` header came (``key`` / ``no-key``), plus the body's length.

``--watch``: bind nothing until a process with ``--api-key-file`` and ``--port N`` in its
command line appears (anyfill's llama-server), then bind N at once: the attacker that reads
the chosen port from the process list and races llama-server for it.
"""

from __future__ import annotations

import http.server
import itertools
import json
import socket
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self, status: int, body: dict[str, object]) -> None:
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else b""
        key = "key" if self.headers.get("authorization") else "no-key"
        print(f"request {self.command} {self.path} {key} {len(data)}", flush=True)
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._answer(200, {"status": "ok"})
        else:
            self._answer(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else b""
        key = "key" if self.headers.get("authorization") else "no-key"
        print(f"request {self.command} {self.path} {key} {len(data)}", flush=True)
        final = {"content": "", "stop": True, "stop_type": "eos", "timings": {}}
        events = [{"content": "stolen", "stop": False}, final]
        raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    allow_reuse_address = False  # as a plain listener: no sharing of the port


def port_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return None
    if b"--api-key-file" not in argv:
        return None
    for flag, value in itertools.pairwise(argv):
        if flag == b"--port":
            return int(value)
    return None


def first_port_seen() -> int:
    """Polls the process list, re-reading only young processes (a child between fork and
    exec still shows its parent's command line): fast enough to beat a llama-server to its
    bind now and then."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    old: set[str] = set()
    while True:
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        for pid in os.listdir("/proc"):
            if pid in old or not pid.isdigit():
                continue
            port = port_of(pid)
            if port is not None:
                return port
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    started = int(handle.read().rsplit(")", 1)[1].split()[19]) / tick
            except (OSError, ValueError, IndexError):
                continue
            if uptime - started > 5:
                old.add(pid)


def main() -> None:
    port = first_port_seen() if sys.argv[1] == "--watch" else int(sys.argv[1])
    try:
        server = Server(("127.0.0.1", port), Handler)
    except OSError as exc:
        print(f"bind failed {exc}", flush=True)
        return
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

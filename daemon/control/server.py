"""The control socket's asyncio server, run by the daemon for its whole life.

Only this user's processes can connect: the socket is 0600 in a 0700 directory of ours, and
on Linux each connection's peer credentials (``SO_PEERCRED``) are checked too, so even a
process that can reach the file (root) is refused when it runs as another user. Each
connection carries one request and gets one answer; bad input (not JSON, a line over
:data:`~.protocol.MAX_LINE`, a silent client, an unknown command, a failing handler) gets an
error answer or a closed connection and never stops the daemon. When
:data:`MAX_CONNECTIONS` are open, a new one closes the oldest that has not sent its request
yet (a real client sends it as it connects): silent connections can not lock ``anyfill
status`` out. What a client sent is logged with its control characters escaped.

Start-up is two steps so a second daemon is refused before it grabs the hotkeys: entering
the context binds the socket (refusing when a live daemon answers on it, replacing a stale
one), :meth:`ControlServer.start_serving` starts answering once the commands can act.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import struct
import sys
from types import TracebackType
from typing import Any

from anyfill.daemon import runtime_dir
from anyfill.daemon.control import protocol
from anyfill.daemon.control.commands import CommandError, Commands
from anyfill.daemon.control.instance import running_message
from anyfill.daemon.errors import AlreadyRunning, ControlError
from anyfill.daemon.log import printable

log = logging.getLogger("anyfill.control")

READ_TIMEOUT_S = 5.0
"""A client that connects and says nothing is dropped after this long."""
MAX_CONNECTIONS = 32
DISCARD_LIMIT = 16 * 1024 * 1024
"""After a request over the line limit, at most this much more input is read and dropped."""
DISCARD_IDLE_S = 1.0
"""... and the reading stops once the client has sent nothing for this long."""
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ControlServer:
    """``async with ControlServer(commands) as server: ...; await server.start_serving()``."""

    def __init__(
        self,
        commands: Commands,
        path: str | None = None,
        *,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.commands = commands
        self.path = path if path is not None else runtime_dir.socket_path()
        self._read_timeout_s = read_timeout_s
        self._max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._inode: int | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._silent: dict[asyncio.Task[Any], asyncio.StreamReader] = {}
        """Connections still waiting for their request line, oldest first."""
        self._evicted: set[asyncio.Task[Any]] = set()
        self._overlong: set[asyncio.Task[Any]] = set()
        """Connections whose request was over the limit: the rest of it is read and dropped."""
        self.evicted = 0

    async def __aenter__(self) -> ControlServer:
        sock = self._bind()
        try:
            self._server = await asyncio.start_unix_server(
                self._on_connection, sock=sock, limit=protocol.MAX_LINE, start_serving=False
            )
        except BaseException:
            sock.close()
            self._unlink()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start_serving(self) -> None:
        if self._server is None:
            raise RuntimeError("the control server is not bound; use 'async with'")
        await self._server.start_serving()
        log.debug("control socket listening on %s", self.path)

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections))
        await server.wait_closed()
        self._unlink()

    # -- binding -------------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        directory = os.path.dirname(self.path)
        runtime_dir.ensure_private_dir(directory)
        runtime_dir.check_socket_path_length(self.path)
        self._replace_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The directory is 0700, so nobody else can reach the socket between bind and chmod.
            sock.bind(self.path)
            os.chmod(self.path, 0o600)
            self._inode = os.lstat(self.path).st_ino
            sock.listen(16)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot listen on {self.path}: {exc.strerror or exc}") from exc
        return sock

    @staticmethod
    def _replace_stale(path: str) -> None:
        """Refuse when a daemon answers on ``path``; remove a socket nobody listens on."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(info.st_mode):
            raise ControlError(f"{path} exists and is not a socket; remove it and start again")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            log.info("replaced a stale control socket (a daemon that did not stop cleanly)")
            return
        except OSError as exc:  # a full backlog or a timeout: someone is there
            log.debug("control socket probe: %s", exc)
        finally:
            probe.close()
        raise AlreadyRunning(running_message(None, path))

    def _unlink(self) -> None:
        """Remove our socket, unless a newer daemon already replaced it."""
        if self._inode is None:
            return
        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        self._inode = None

    # -- one connection ------------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            answer = await self._answer_connection(reader, writer)
            writer.write(answer)
            await writer.drain()
            if task in self._overlong:
                await _discard_rest(reader)
        except (ConnectionError, OSError) as exc:
            log.debug("control client went away: %s", exc)
        except asyncio.CancelledError:
            # Closing the server: end quietly. (Python 3.11's start_unix_server calls
            # task.exception() on a cancelled handler and logs a traceback per connection.)
            pass
        except Exception:  # the last line of defence: log, keep serving
            log.exception("the control connection failed")
        finally:
            if task is not None:
                self._connections.discard(task)
                self._overlong.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _answer_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes:
        peer = _peer_credentials(writer)
        if peer is not None and peer[1] != os.geteuid():
            log.warning(
                "refused a control connection from pid %d of uid %d (only uid %d may control "
                "this daemon)",
                peer[0],
                peer[1],
                os.geteuid(),
            )
            return protocol.error(protocol.FORBIDDEN, "this daemon belongs to another user")
        self._make_room()
        if len(self._connections) > self._max_connections:
            return protocol.error(protocol.FAILED, "too many control connections; try again")
        task = asyncio.current_task()
        if task is not None:
            self._silent[task] = reader
        try:
            async with asyncio.timeout(self._read_timeout_s):
                line = await reader.readline()
            if task in self._evicted:
                self._evicted.discard(task)
                return protocol.error(
                    protocol.TIMEOUT, "closed to make room: this connection sent no request"
                )
        except TimeoutError:
            return protocol.error(protocol.TIMEOUT, "no request line arrived in time")
        except (ValueError, asyncio.LimitOverrunError):
            if task is not None:
                # A client still sending its long line would get EPIPE instead of this answer
                # if we closed now: read its remaining bytes after answering.
                self._overlong.add(task)
            return protocol.error(
                protocol.TOO_LONG, f"the request is longer than {protocol.MAX_LINE} bytes"
            )
        finally:
            if task is not None:
                self._silent.pop(task, None)
        if not line.strip():
            return protocol.error(protocol.BAD_REQUEST, "empty request")
        return await self.answer(line)

    def _make_room(self) -> None:
        """Over the limit: close the oldest connections that have said nothing yet."""
        while len(self._connections) > self._max_connections and self._silent:
            oldest = next(iter(self._silent))
            # Its read ends now (as if the client had closed); it answers and goes.
            self._silent.pop(oldest).feed_eof()
            self._evicted.add(oldest)
            self._connections.discard(oldest)
            self.evicted += 1
            if self.evicted in (1, 10, 100) or self.evicted % 1000 == 0:
                log.warning(
                    "control socket: %d connection(s) that sent nothing were closed to make "
                    "room (at most %d at once)",
                    self.evicted,
                    self._max_connections,
                )

    async def answer(self, line: bytes) -> bytes:
        """The answer line to one request line (public for tests and in-process callers)."""
        try:
            message = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, too deep, huge ints
            return protocol.error(protocol.BAD_JSON, f"the request is not a JSON line: {exc}")
        if not isinstance(message, dict):
            return protocol.error(protocol.BAD_REQUEST, "the request must be a JSON object")
        version = message.get("v", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            return protocol.error(protocol.BAD_REQUEST, "'v' must be a positive integer")
        if version > protocol.VERSION:
            return protocol.error(
                protocol.UNSUPPORTED_VERSION,
                f"this daemon speaks control protocol {protocol.VERSION}, the request "
                f"{version}: restart anyfill after an upgrade",
            )
        cmd, args = message.get("cmd"), message.get("args", {})
        if not isinstance(cmd, str) or not cmd:
            return protocol.error(protocol.BAD_REQUEST, "'cmd' must be a command name")
        if not isinstance(args, dict):
            return protocol.error(protocol.BAD_REQUEST, "'args' must be a JSON object")
        log.debug("control command %s", printable(cmd))
        try:
            result = await self.commands.dispatch(cmd, args)
            encoded = protocol.ok(result)
        except CommandError as exc:
            return protocol.error(exc.code, exc.message)
        except Exception as exc:
            log.exception("control command %r failed", cmd)
            return protocol.error(
                protocol.INTERNAL, f"{cmd!r} failed: {type(exc).__name__}: {printable(str(exc))}"
            )
        if len(encoded) > protocol.MAX_LINE:
            log.error(
                "control command %r answered %d bytes; the limit is %d",
                cmd,
                len(encoded),
                protocol.MAX_LINE,
            )
            return protocol.error(protocol.INTERNAL, f"{cmd} produced an answer that is too long")
        return encoded


async def _discard_rest(reader: asyncio.StreamReader) -> None:
    """Read and drop what the client still sends, up to a newline, EOF, a pause or a cap."""
    dropped = 0
    while dropped < DISCARD_LIMIT:
        try:
            async with asyncio.timeout(DISCARD_IDLE_S):
                chunk = await reader.read(64 * 1024)
        except TimeoutError:
            return
        if not chunk or b"\n" in chunk:
            return
        dropped += len(chunk)


def _peer_credentials(writer: asyncio.StreamWriter) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the connecting process where the platform tells (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    sock = writer.get_extra_info("socket")
    if sock is None:
        return (0, -1, -1)
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    except OSError:
        return (0, -1, -1)  # unknown peer on a platform that should tell: refuse it
    pid, uid, gid = _PEERCRED.unpack(raw)
    return pid, uid, gid

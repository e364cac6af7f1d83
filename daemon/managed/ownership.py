"""Whose socket listens on the managed server's port: proof before the key or any text goes.

A port on 127.0.0.1 is open to every local user: another one may listen on it first (a fixed
port, or one read from the process list between anyfill's pick and llama-server's bind), and
would then receive ``/health`` with the managed key, and the captured text. So before the
supervisor sends anything it asks the kernel: every socket listening on the port (on
127.0.0.1, or on a wildcard address that would take the connection too) must be an open file
of the child anyfill started or of one of its descendants (the guard's child, the prebuilt
runtime's threads share the process's files). On Linux the listening sockets (inode, uid)
come from the kernel's socket diagnostics over netlink (what ``ss -ltn`` asks; listening
sockets only), or ``/proc/net/tcp{,6}`` where netlink is refused, and the child's sockets
from ``/proc/<pid>/fd``. Cost: ``bench/bench_port_owner.py``.

Where there is no ``/proc`` the answer is :data:`UNKNOWN` and the supervisor falls back to
the weaker checks (``/props`` must name the model it started).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["NOBODY", "OURS", "UNKNOWN", "PortOwner", "port_owner"]

Verdict = Literal["ours", "nobody", "other", "unknown"]

_LISTEN = "0A"
#: Local addresses whose listener takes a connection to 127.0.0.1 (as /proc/net writes them).
_V4 = {"0100007F", "00000000"}
_V6 = {
    "00000000000000000000000000000000",  # ::, dual-stack
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


@dataclass(frozen=True)
class PortOwner:
    verdict: Verdict
    """'ours': only the child (or its descendants) listens; 'nobody': no one yet (it is
    still starting); 'other': a socket anyfill's child does not hold listens there;
    'unknown': this system cannot tell."""
    uids: tuple[int, ...] = ()
    """For 'other': the uids of the foreign listeners, as the kernel records them."""

    def describe(self) -> str:
        if self.verdict != "other":
            return self.verdict
        owners = ", ".join(str(uid) for uid in self.uids) or "?"
        return f"a program anyfill did not start listens there (uid {owners})"


OURS = PortOwner("ours")
NOBODY = PortOwner("nobody")
UNKNOWN = PortOwner("unknown")


def _listeners(port: int, proc: Path) -> list[tuple[int, int]] | None:
    """(inode, uid) of every socket listening where 127.0.0.1:``port`` would connect: from
    the kernel's socket diagnostics (netlink, listening sockets only: microseconds), else
    from ``/proc/net/tcp{,6}`` (which walks every TCP socket: ~15 ms on a big machine)."""
    try:
        return _diag_listeners(port)
    except OSError:
        return _proc_listeners(port, proc)


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_LISTEN = 10
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBxI48x")  # inet_diag_req_v2: family, protocol, ext, states, id
_MESSAGE = struct.Struct("=BBBB2x2x16s16sI8xIIIII")  # inet_diag_msg
_SPORT = struct.Struct("!H")
_LOOPBACK: dict[int, set[bytes]] = {
    socket.AF_INET: {b"\x7f\x00\x00\x01", bytes(4)},
    socket.AF_INET6: {bytes(16), bytes(10) + b"\xff\xff\x7f\x00\x00\x01"},
}


def _diag_listeners(port: int) -> list[tuple[int, int]]:
    if not hasattr(socket, "AF_NETLINK"):
        raise OSError("no netlink here")
    found: list[tuple[int, int]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(1.0)
        for family in (socket.AF_INET, socket.AF_INET6):
            body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 1 << _TCP_LISTEN)
            header = _HEADER.pack(
                _HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0
            )
            diag.send(header + body)
            try:
                found += _diag_answers(diag, family, port)
            except OSError:
                if family == socket.AF_INET:
                    raise
                # No IPv6 in this kernel: no IPv6 listener either.
    return found


def _diag_answers(diag: socket.socket, family: int, port: int) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    while True:
        data = diag.recv(65536)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
            if kind == _NLMSG_DONE:
                return found
            if kind == _NLMSG_ERROR:
                raise OSError("socket diagnostics refused the request")
            start = offset + _HEADER.size
            if length >= _HEADER.size + _MESSAGE.size:
                fields = _MESSAGE.unpack_from(data, start)
                sport = _SPORT.unpack(data[start + 4 : start + 6])[0]
                source, uid, inode = fields[4], fields[-2], fields[-1]
                address = source[:4] if family == socket.AF_INET else source
                if sport == port and address in _LOOPBACK[family]:
                    found.append((inode, uid))
            offset += (length + 3) & ~3
            if length == 0:
                raise OSError("a malformed netlink answer")


def _proc_listeners(port: int, proc: Path) -> list[tuple[int, int]] | None:
    wanted = f"{port:04X}"
    found: list[tuple[int, int]] = []
    tables = ((proc / "net" / "tcp", _V4), (proc / "net" / "tcp6", _V6))
    readable = False
    for table, addresses in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            address, _, local_port = fields[1].partition(":")
            if local_port == wanted and address in addresses:
                found.append((int(fields[9]), int(fields[7])))
    return found if readable else None


def _family(pid: int, proc: Path) -> list[int]:
    """``pid`` and its descendants (the guard's child, a wrapper's server)."""
    family: list[int] = []
    queue = [pid]
    while queue and len(family) < 64:
        current = queue.pop()
        family.append(current)
        try:
            tasks = list((proc / str(current) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                queue += [int(child) for child in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
    return family


def _sockets(pid: int, proc: Path) -> set[int]:
    inodes: set[int] = set()
    folder = proc / str(pid) / "fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(folder / name)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def port_owner(port: int, pid: int, *, proc: Path = Path("/proc")) -> PortOwner:
    """Who listens on 127.0.0.1:``port``, judged against the child ``pid``."""
    listeners = _listeners(port, proc)
    if listeners is None:
        return UNKNOWN
    if not listeners:
        return NOBODY
    ours: set[int] = set()
    for member in _family(pid, proc):
        ours |= _sockets(member, proc)
    foreign = tuple(sorted({uid for inode, uid in listeners if inode not in ours}))
    if foreign or any(inode not in ours for inode, _ in listeners):
        return PortOwner("other", foreign)
    return OURS

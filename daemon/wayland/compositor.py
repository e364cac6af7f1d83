"""The focused window from the compositor's own IPC, where it has one (sway, Hyprland, KWin).

Wayland gives clients no global view of windows; sway and Hyprland answer over a local
socket. Each call is one short round trip (well under a millisecond on sway), so the focus
guard can ask right before inserting.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.desktop.process import process_name
from anyfill.daemon.wayland.session import compositor, runtime_dir

log = logging.getLogger("anyfill.wayland.compositor")

TIMEOUT_S = 0.5
_I3_MAGIC = b"i3-ipc"
_GET_TREE = 4


class FocusSource(Protocol):
    name: str

    def focused(self) -> Target | None: ...


class SwayFocus:
    """sway's IPC (the i3 protocol): GET_TREE, then the node marked focused."""

    name = "sway IPC"

    def __init__(self, socket_path: str) -> None:
        self._path = socket_path

    def focused(self) -> Target | None:
        try:
            tree = self._request(_GET_TREE)
        except (OSError, ValueError) as exc:
            log.debug("sway IPC failed: %s", exc)
            return None
        node = next((n for n in _walk(tree) if n.get("focused")), None)
        if node is None or node.get("type") not in ("con", "floating_con"):
            return None  # an empty workspace or the output has the focus
        pid = node.get("pid")
        app = node.get("app_id") or (node.get("window_properties") or {}).get("class") or ""
        return Target(
            window_id=int(node["id"]),
            app=str(app),
            process=process_name(pid),
            title=str(node.get("name") or ""),
            pid=int(pid) if isinstance(pid, int) and pid > 0 else None,
        )

    def _request(self, kind: int, payload: bytes = b"") -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(self._path)
            sock.sendall(_I3_MAGIC + struct.pack("<II", len(payload), kind) + payload)
            header = _read_exact(sock, len(_I3_MAGIC) + 8)
            if header[: len(_I3_MAGIC)] != _I3_MAGIC:
                raise ValueError("not an i3/sway IPC reply")
            length, _ = struct.unpack("<II", header[len(_I3_MAGIC) :])
            return json.loads(_read_exact(sock, length))


class HyprlandFocus:
    """Hyprland's request socket: ``j/activewindow`` answers JSON."""

    name = "Hyprland IPC"

    def __init__(self, socket_path: Path) -> None:
        self._path = socket_path

    def focused(self) -> Target | None:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(TIMEOUT_S)
                sock.connect(str(self._path))
                sock.sendall(b"j/activewindow")
                chunks = []
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            window = json.loads(b"".join(chunks) or b"{}")
        except (OSError, ValueError) as exc:
            log.debug("Hyprland IPC failed: %s", exc)
            return None
        address = str(window.get("address") or "")
        if not address:
            return None
        pid = window.get("pid")
        return Target(
            window_id=int(address, 16),
            app=str(window.get("class") or ""),
            process=process_name(pid),
            title=str(window.get("title") or ""),
            pid=int(pid) if isinstance(pid, int) and pid > 0 else None,
        )


def compositor_focus(environ: Mapping[str, str]) -> FocusSource | None:
    """The IPC focus source for this session, or None where the compositor has none we use."""
    if environ.get("SWAYSOCK"):
        return SwayFocus(environ["SWAYSOCK"])
    signature = environ.get("HYPRLAND_INSTANCE_SIGNATURE")
    if signature:
        for base in (runtime_dir(environ) / "hypr", Path("/tmp/hypr")):
            path = base / signature / ".socket.sock"
            if path.exists():
                return HyprlandFocus(path)
    if compositor(environ) == "kde":
        from anyfill.daemon.wayland.kwin import KWinFocus

        return KWinFocus(environ.get("DBUS_SESSION_BUS_ADDRESS") or None)
    return None


def _walk(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield node
    for child in (*node.get("nodes", ()), *node.get("floating_nodes", ())):
        yield from _walk(child)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the compositor closed the IPC socket")
        data += chunk
    return bytes(data)

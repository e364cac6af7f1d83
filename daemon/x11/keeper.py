"""The clipboard keeper: a tiny process that puts the user's clipboard back if the daemon dies.

X drops a selection together with its owner. Between a paste's Ctrl+V and the restore
anyfill owns CLIPBOARD with the completion (and during a capture, CLIPBOARD and PRIMARY
with a sentinel); afterwards it owns the user's restored clipboard. A daemon killed by
SIGKILL or a crash in any of those moments used to leave the user with no clipboard.

So before anyfill takes a selection, the keeper (``python -m anyfill.daemon.x11.keeper``,
its own session, started with the desktop) is handed what the user should have if anyfill
died right then: every format of the user's content, acknowledged before the take. The
keeper watches the selections (XFixes): when one that the daemon's window owned loses its
owner because the daemon's X connection closed, the keeper claims it with that content
and serves it until somebody else copies; then it exits. At an orderly exit the daemon
hands the keeper exactly what it serves and asks it to claim that at once (TAKE_OVER),
before it closes: no moment without an owner, and no reliance on the keeper's record of
who owns what.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import struct
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from anyfill.daemon.desktop.ports import ClipSnapshot, Value, Which
from anyfill.daemon.waiting import first_set

if TYPE_CHECKING:
    from anyfill.daemon.x11.connection import XConnection

log = logging.getLogger("anyfill.x11.keeper")

ACK_TIMEOUT_S = 2.0
"""A keeper that takes longer to acknowledge is taken as gone: presses go on without."""
START_TIMEOUT_S = 15.0
"""The keeper's start (a Python process importing python-xlib), waited for at the first
press rather than at the daemon's start."""
CLOSE_WAIT_S = 5.0
"""After the daemon's pipe closed, how long the X server may take to report its end."""
SELECTIONS: dict[Which, str] = {"clipboard": "CLIPBOARD", "primary": "PRIMARY"}
_PACK = {16: "H", 32: "I"}


def encode(which: Which, snapshot: ClipSnapshot) -> bytes:
    """One message: a JSON header line naming each format and its size, then the data."""
    header: list[list[Any]] = []
    blobs: list[bytes] = []
    for name, (type_name, fmt, value) in snapshot.items.items():
        data = (
            value if isinstance(value, bytes) else struct.pack(f"={len(value)}{_PACK[fmt]}", *value)
        )
        header.append([name, type_name, fmt, len(data)])
        blobs.append(data)
    line = json.dumps({"which": which, "items": header}).encode() + b"\n"
    return line + b"".join(blobs)


TAKE_OVER = b'{"take_over": true}\n'
"""The daemon's last message at an orderly exit: claim now what it still owns."""


async def decode(reader: asyncio.StreamReader) -> tuple[Which, ClipSnapshot] | bool | None:
    """The next message: content, True for TAKE_OVER, or None at the end of the stream
    (also mid-message)."""
    try:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            return None
        header = json.loads(line)
        if header.get("take_over") is True:
            return True
        items: dict[str, tuple[str, int, Value]] = {}
        for name, type_name, fmt, size in header["items"]:
            data = await reader.readexactly(size)
            value: Value = data
            if fmt != 8:
                value = struct.unpack(f"={size // (fmt // 8)}{_PACK[fmt]}", data)
            items[name] = (type_name, fmt, value)
    except (asyncio.IncompleteReadError, ValueError, KeyError):
        return None
    which: Which = "primary" if header.get("which") == "primary" else "clipboard"
    return which, ClipSnapshot(items)


class Keeper:
    """The daemon's side: starts the keeper process and hands it the user's content.

    A plain ``subprocess.Popen`` with asyncio pipe transports on its pipes: asyncio's own
    subprocess transport kills a child still running when it is closed or collected, and
    this child must outlive us.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._kept: dict[Which, ClipSnapshot] = {}
        self._lock = asyncio.Lock()
        self._started = False

    async def start(self, window_id: int) -> None:
        """Start the keeper watching the selections of our ``window_id``; a keeper that
        cannot start is logged and done without (xclip keeps the text at an orderly exit,
        a crash loses the clipboard as before)."""
        loop = asyncio.get_running_loop()
        try:
            process = subprocess.Popen(  # noqa: ASYNC220 - returns at once, never waited for
                [sys.executable, "-m", "anyfill.daemon.x11.keeper", str(window_id)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,  # a signal to the daemon's group must not reach it
            )
            assert process.stdin is not None
            assert process.stdout is not None
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), process.stdout
            )
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), process.stdin
            )
        except OSError as exc:
            log.warning("the clipboard keeper did not start (%s): a crash would lose it", exc)
            return
        self._process, self._reader = process, reader
        self._writer = asyncio.StreamWriter(transport, protocol, None, loop)
        self._started = False  # its first "ok" is read by the first keep()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    async def keep(self, which: Which, snapshot: ClipSnapshot) -> None:
        """Hand the keeper ``snapshot`` as the user's ``which``; returns once it has it."""
        async with self._lock:
            writer = self._writer
            if self._kept.get(which) is snapshot or not self.alive or writer is None:
                return
            try:
                if not self._started:
                    await self._ack(START_TIMEOUT_S)
                    self._started = True
                writer.write(encode(which, snapshot))
                await asyncio.wait_for(writer.drain(), ACK_TIMEOUT_S)
                await self._ack(ACK_TIMEOUT_S)
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.warning("the clipboard keeper is gone (%s): a crash would lose it", exc)
                self._abandon(kill=True)
                return
            self._kept[which] = snapshot

    async def take_over(self) -> bool:
        """At an orderly exit, once handed what we serve: the keeper claims now each
        selection we still own, so that nobody finds it without an owner between our end
        and the keeper noticing it. True once it acknowledged."""
        async with self._lock:
            writer = self._writer
            if not self._started or not self.alive or writer is None:
                return False
            try:
                writer.write(TAKE_OVER)
                await asyncio.wait_for(writer.drain(), ACK_TIMEOUT_S)
                await self._ack(ACK_TIMEOUT_S)
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.warning("the clipboard keeper did not take over (%s)", exc)
                return False
            return True

    async def close(self) -> None:
        """At an orderly exit: the keeper keeps what it took over, or takes over what it
        was handed once we close the X connection, and exits by itself once nothing is
        left to keep."""
        self._abandon(kill=False)

    def _abandon(self, *, kill: bool) -> None:
        process, writer = self._process, self._writer
        self._process = self._writer = self._reader = None
        if writer is not None:
            writer.close()  # the keeper reads the end of its input
        if process is not None and kill:
            process.kill()

    async def _ack(self, timeout_s: float) -> None:
        reader = self._reader
        if reader is None:
            raise ConnectionError("no keeper")
        line = await asyncio.wait_for(reader.readline(), timeout_s)
        if line != b"ok\n":
            raise ConnectionError("no acknowledgement")


# -- the keeper process ------------------------------------------------------------------


class _Keeping:
    """The keeper's state: the daemon's selections, what the user should have in each,
    and the claims made for them."""

    def __init__(self, conn: XConnection, daemon_window: int) -> None:
        from anyfill.daemon.x11.selection import X11Clipboard

        self.conn, self.daemon_window = conn, daemon_window
        self.clipboard = X11Clipboard(conn)
        self.atoms = {conn.atom(name): which for which, name in SELECTIONS.items()}
        self.content: dict[Which, ClipSnapshot] = {}
        self.daemon_owns = {which: self._daemon_owns(atom) for atom, which in self.atoms.items()}
        self.claims: list[asyncio.Task[asyncio.Event | None]] = []
        self.gone = asyncio.Event()
        """The daemon's X connection closed (or its window went)."""

    def _daemon_owns(self, atom: int) -> bool:
        owner = self.conn.display.get_selection_owner(atom)
        return int(getattr(owner, "id", 0)) == self.daemon_window

    def watch(self) -> None:
        from Xlib.ext import xfixes

        display = self.conn.display
        display.xfixes_query_version()
        event_code, _ = display.extension_event.SetSelectionOwnerNotify
        self.conn.on(event_code, self._on_xfixes)
        mask = (
            xfixes.XFixesSetSelectionOwnerNotifyMask
            | xfixes.XFixesSelectionWindowDestroyNotifyMask
            | xfixes.XFixesSelectionClientCloseNotifyMask
        )
        for atom in self.atoms:
            display.xfixes_select_selection_input(self.conn.window, atom, mask)
        self.conn.flush()

    def _on_xfixes(self, event: Any) -> None:
        from Xlib.ext import xfixes

        which = self.atoms.get(event.selection)
        if which is None:
            return
        if event.sub_code == xfixes.XFixesSetSelectionOwnerNotify:
            owner = int(getattr(event.owner, "id", event.owner))
            self.daemon_owns[which] = owner == self.daemon_window
            return
        if self.daemon_owns[which]:
            self.daemon_owns[which] = False
            self.gone.set()
            self._claim_soon(which)

    def take_over(self) -> None:
        """Claim now what the daemon owns, as the server says (our record of its claims
        may lag: their notices and its pipe are read apart)."""
        for atom, which in self.atoms.items():
            if self._daemon_owns(atom):
                self.daemon_owns[which] = False  # the end of its connection claims no more
                self._claim_soon(which)
        self.conn.schedule_pump()

    def _claim_soon(self, which: Which) -> None:
        self.claims.append(asyncio.get_running_loop().create_task(self._claim(which)))

    async def _claim(self, which: Which) -> asyncio.Event | None:
        snapshot = self.content.get(which)
        if snapshot is None or snapshot.empty:
            return None
        offer = await self.clipboard.offer(which, snapshot)
        log.info("anyfill ended while owning %s: the user's is back", SELECTIONS[which])
        return offer.lost

    def still_owned(self) -> bool:
        """Whether the daemon owned a selection we hold content for (its end is coming)."""
        return any(
            owns and not self.content.get(which, ClipSnapshot()).empty
            for which, owns in self.daemon_owns.items()
        )


async def serve(daemon_window: int) -> None:
    from anyfill.daemon.x11.connection import XConnection

    async with XConnection() as conn:
        keeping = _Keeping(conn, daemon_window)
        keeping.watch()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        _acknowledge()
        while (message := await decode(reader)) is not None:
            if message is True:
                keeping.take_over()
                # Acknowledged once claimed: the daemon closes its connection after.
                await asyncio.gather(*keeping.claims)
            elif message is not False:
                which, snapshot = message
                keeping.content[which] = snapshot
            _acknowledge()
        # The daemon closed the pipe (exit or death): its X connection ends about now.
        if keeping.still_owned():
            try:
                await asyncio.wait_for(keeping.gone.wait(), CLOSE_WAIT_S)
            except TimeoutError:
                log.warning("anyfill's pipe closed but it still owns a selection")
                return
        for lost in await asyncio.gather(*keeping.claims):
            if lost is not None:
                # Serve the user's content until somebody else copies (or X ends).
                await first_set(lost, conn.lost)


def _acknowledge() -> None:
    try:
        sys.stdout.buffer.write(b"ok\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The daemon is gone (it may have exited before we started): the end of its pipe
        # on stdin ends the loop, and whatever it handed over is still kept. Later writes
        # and the flush at exit go nowhere instead of raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(prog="anyfill-clipboard-keeper")
    parser.add_argument("window", type=int, help="the daemon's selection-owner window id")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="anyfill-keeper: %(levelname)s: %(message)s")
    asyncio.run(serve(args.window))


if __name__ == "__main__":
    main()

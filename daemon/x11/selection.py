"""X selections (CLIPBOARD, PRIMARY): read every format, own and serve them, know who fetched.

Owning the selection ourselves (instead of handing text to xclip) tells us exactly when
the target application fetched the pasted text, so the user's clipboard is restored right
after that and never before; and a SelectionClear tells us when somebody else copied, so
we never restore over it.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from dataclasses import dataclass
from typing import Any, Literal

from anyfill.daemon.desktop.ports import ClipSnapshot, Offer, Value, Which, saved_or_refused
from anyfill.daemon.errors import InsertError
from anyfill.daemon.x11.connection import XConnection

log = logging.getLogger("anyfill.x11.selection")

# Targets that describe the selection rather than carry its data.
META_TARGETS = frozenset(
    {
        "TARGETS",
        "MULTIPLE",
        "TIMESTAMP",
        "DELETE",
        "INSERT_SELECTION",
        "INSERT_PROPERTY",
        "SAVE_TARGETS",
        "SAVE_CONTEXT",
    }
)
SNAPSHOT_TIMEOUT_S = 1.0
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024
_NAMES: dict[Which, str] = {"clipboard": "CLIPBOARD", "primary": "PRIMARY"}


@dataclass
class _Outgoing:
    """An INCR transfer we serve in chunks, one per property deletion."""

    requestor: Any
    prop: int
    type_atom: int
    data: bytes
    offset: int = 0


@dataclass
class _State:
    offer: Offer
    reader: int | None
    """Client id bits of the program whose fetches count, or None for anyone."""

    @property
    def since(self) -> int:
        """The server time we became the owner."""
        return self.offer.stamp


class X11Clipboard:
    """The :class:`~anyfill.daemon.desktop.ports.Clipboard` port on X11."""

    def __init__(self, conn: XConnection) -> None:
        from Xlib import X

        self._conn = conn
        self._owned: dict[int, _State] = {}
        self._notify: dict[int, asyncio.Future[Any]] = {}
        self._prop_waiters: dict[tuple[int, int], asyncio.Queue[Any]] = {}
        self._outgoing: dict[tuple[int, int], _Outgoing] = {}
        self._props = 0
        self._changed: dict[int, int] = {}
        """Per selection, the latest ownership change we know the server time of."""
        conn.on(X.SelectionRequest, self._on_request)
        conn.on(X.SelectionClear, self._on_clear)
        conn.on(X.SelectionNotify, self._on_notify)
        conn.on(X.PropertyNotify, self._on_property)
        # Largest property write in one request, minus header room.
        self._chunk = max(4096, conn.display.display.info.max_request_length * 4 - 1024)

    # -- ports -----------------------------------------------------------------------

    async def snapshot(self, which: Which) -> ClipSnapshot:
        """Every format the current owner offers (our own offer is copied directly)."""
        from Xlib import X

        selection = self._conn.atom(_NAMES[which])
        mine = self._owned.get(selection)
        if mine is not None:
            return mine.offer.snapshot
        owner = self._conn.display.get_selection_owner(selection)
        if owner == X.NONE or getattr(owner, "id", 0) == 0:
            return ClipSnapshot()
        timestamp = await self._conn.server_time()
        got = await self._convert(selection, "TARGETS", timestamp, SNAPSHOT_TIMEOUT_S)
        if got is None or not isinstance(got[2], tuple):
            # An owner that cannot list its targets: keep at least its text.
            text = await self._read_target(selection, "UTF8_STRING", timestamp, 0.5)
            return saved_or_refused(
                which, 1, ClipSnapshot.from_text(text) if text is not None else ClipSnapshot()
            )
        names = [self._conn.atom_name(atom) for atom in got[2] if atom]
        wanted = [name for name in dict.fromkeys(names) if name not in META_TARGETS]
        results = await asyncio.gather(
            *(self._convert(selection, name, timestamp, SNAPSHOT_TIMEOUT_S) for name in wanted)
        )
        items: dict[str, tuple[str, int, Value]] = {}
        total = 0
        for name, result in zip(wanted, results, strict=True):
            if result is None:
                continue
            size = len(result[2]) * (1 if result[1] == 8 else result[1] // 8)
            if total + size > SNAPSHOT_MAX_BYTES:
                log.warning("clipboard format %s skipped: over %d bytes", name, total + size)
                continue
            total += size
            items[name] = result
        log.debug("saved %s: %d formats, %d bytes", which, len(items), total)
        return saved_or_refused(which, len(wanted), ClipSnapshot(items))

    async def offer(self, which: Which, snapshot: ClipSnapshot, reader: int | None = None) -> Offer:
        state = await self._claim(which, snapshot, reader, None)
        if state is None:
            raise InsertError(f"could not take the {_NAMES[which]} selection")
        return state.offer

    async def _claim(
        self, which: Which, snapshot: ClipSnapshot, reader: int | None, at: int | None
    ) -> _State | None:
        """Own ``which`` as of server time ``at`` (now when None); None if the server
        kept a newer owner (it ignores a claim older than the last change)."""
        selection = self._conn.atom(_NAMES[which])
        timestamp = at if at is not None else await self._conn.server_time()
        client = None if reader is None else self._client(reader)
        state = _State(Offer(snapshot, stamp=timestamp), reader=client)
        self._conn.window.set_selection_owner(selection, timestamp)
        owner = self._conn.display.get_selection_owner(selection)
        if getattr(owner, "id", 0) != self._conn.window.id:
            return None
        self._changed[selection] = max(timestamp, self._changed.get(selection, 0))
        self._owned[selection] = state
        return state

    async def restore(
        self,
        which: Which,
        snapshot: ClipSnapshot,
        reader: int | None = None,
        as_of: Offer | None = None,
    ) -> Offer | None:
        at = None
        if as_of is not None and as_of.stamp:
            # Not before a change we saw since (an app's copy): the server would refuse.
            at = max(as_of.stamp, self._changed.get(self._conn.atom(_NAMES[which]), 0))
        if not snapshot.empty:
            state = await self._claim(which, snapshot, reader, at)
            if state is None:
                log.info("%s changed hands meanwhile; not restoring it", _NAMES[which])
                return None
            return state.offer
        # It had no owner: whoever holds it now (the app we copied from) lets go.
        from Xlib import X
        from Xlib.protocol import request

        selection = self._conn.atom(_NAMES[which])
        request.SetSelectionOwner(
            display=self._conn.display.display,
            window=X.NONE,
            selection=selection,
            time=at if at is not None else await self._conn.server_time(),
        )
        state = self._owned.pop(selection, None)
        if state is not None:
            state.offer.lost.set()
        self._conn.flush()
        return None

    async def read_text(self, which: Which, timeout_s: float) -> str | None:
        selection = self._conn.atom(_NAMES[which])
        mine = self._owned.get(selection)
        if mine is not None:
            return mine.offer.snapshot.text()
        timestamp = await self._conn.server_time()
        text = await self._read_target(selection, "UTF8_STRING", timestamp, timeout_s)
        if text is None:
            raw = await self._convert(selection, "STRING", timestamp, timeout_s)
            if raw is not None and isinstance(raw[2], bytes):
                text = raw[2].decode("latin-1")
        return text

    async def hand_over(self) -> None:
        """Before we exit: what we own (usually the user's restored clipboard) must outlive
        us. X drops a selection with its owner, so a clipboard manager saves it (ICCCM
        SAVE_TARGETS, all formats) or, without one, xclip / xsel keeps the text."""
        for selection, state in list(self._owned.items()):
            name = self._conn.atom_name(selection)
            if name == "CLIPBOARD" and await self._save_to_manager():
                log.info("the clipboard manager took over the clipboard")
                continue
            text = state.offer.snapshot.text()
            if text is not None:
                await _spawn_holder(name, text)

    async def _save_to_manager(self) -> bool:
        manager = self._conn.atom("CLIPBOARD_MANAGER")
        if int(getattr(self._conn.display.get_selection_owner(manager), "id", 0)) == 0:
            return False
        prop = self._conn.atom("ANYFILL_SAVE")
        timestamp = await self._conn.server_time()
        return await self._ask_owner(manager, "SAVE_TARGETS", prop, timestamp, 3.0)

    def _client(self, window_id: int) -> int:
        """The X client a resource belongs to: ids share the bits outside the id mask."""
        return window_id & ~int(self._conn.display.display.info.resource_id_mask)

    def holder(self, which: Which) -> Literal["us", "nobody", "other"]:
        owner = self._conn.display.get_selection_owner(self._conn.atom(_NAMES[which]))
        owner_id = int(getattr(owner, "id", 0))
        if owner_id == 0:
            return "nobody"
        return "us" if owner_id == self._conn.window.id else "other"

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        owner = self._conn.display.get_selection_owner(self._conn.atom(_NAMES[which]))
        self._conn.schedule_pump()  # the reply wait may have queued events: dispatch them
        owner_id = int(getattr(owner, "id", 0))
        return owner_id != 0 and self._client(owner_id) == self._client(window_id)

    # -- reading ---------------------------------------------------------------------

    async def _read_target(
        self, selection: int, target: str, timestamp: int, timeout_s: float
    ) -> str | None:
        got = await self._convert(selection, target, timestamp, timeout_s)
        if got is None or not isinstance(got[2], bytes):
            return None
        return got[2].decode("utf-8", "replace")

    async def _convert(
        self, selection: int, target: str, timestamp: int, timeout_s: float
    ) -> tuple[str, int, Value] | None:
        """Ask the owner for ``target`` into a fresh property and read the answer."""
        self._props += 1
        prop = self._conn.atom(f"ANYFILL_SEL_{self._props % 256}")
        if not await self._ask_owner(selection, target, prop, timestamp, timeout_s):
            return None
        return await self._read_property(prop, timeout_s)

    async def _ask_owner(
        self, selection: int, target: str, prop: int, timestamp: int, timeout_s: float
    ) -> bool:
        """ConvertSelection: True when the owner answered into ``prop``, False when it
        refused or did not answer in time."""
        from Xlib import X

        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._notify[prop] = future
        try:
            self._conn.window.convert_selection(selection, self._conn.atom(target), prop, timestamp)
            self._conn.flush()
            event = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            log.debug("no answer for %s", target)
            return False
        finally:
            self._notify.pop(prop, None)
        return bool(event.property != X.NONE)

    async def _read_property(self, prop: int, timeout_s: float) -> tuple[str, int, Value] | None:
        from Xlib import X

        window = self._conn.window
        key = (window.id, prop)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._prop_waiters[key] = queue
        try:
            reply = window.get_property(prop, X.AnyPropertyType, 0, 2**29, True)
            self._conn.flush()
            if reply is None:
                return None
            type_name = self._conn.atom_name(reply.property_type)
            if type_name != "INCR":
                return type_name, reply.format, _value(reply)
            # Incremental transfer: each deletion asks the owner for the next chunk.
            parts: list[Value] = []
            fmt = 8
            while True:
                while True:
                    event = await asyncio.wait_for(queue.get(), timeout_s)
                    if event.state == X.PropertyNewValue:
                        break
                chunk = window.get_property(prop, X.AnyPropertyType, 0, 2**29, True)
                self._conn.flush()
                if chunk is None or not chunk.value:
                    break
                type_name, fmt = self._conn.atom_name(chunk.property_type), chunk.format
                parts.append(_value(chunk))
            if fmt == 8:
                return type_name, 8, b"".join(p for p in parts if isinstance(p, bytes))
            return type_name, fmt, tuple(v for p in parts if isinstance(p, tuple) for v in p)
        except TimeoutError:
            log.debug("incremental clipboard transfer stalled")
            return None
        finally:
            self._prop_waiters.pop(key, None)

    # -- events ----------------------------------------------------------------------

    def _on_notify(self, event: Any) -> None:
        future = self._notify.get(event.property)
        if future is not None and not future.done():
            future.set_result(event)

    def _on_property(self, event: Any) -> None:
        from Xlib import X

        key = (event.window.id, event.atom)
        queue = self._prop_waiters.get(key)
        if queue is not None:
            queue.put_nowait(event)
        outgoing = self._outgoing.get(key)
        if outgoing is not None and event.state == X.PropertyDelete:
            self._send_next_chunk(key, outgoing)

    def _on_clear(self, event: Any) -> None:
        from Xlib import X

        if event.time != X.CurrentTime:
            self._changed[event.atom] = max(event.time, self._changed.get(event.atom, 0))
        state = self._owned.get(event.atom)
        if state is None:
            return
        if event.time != X.CurrentTime and event.time < state.since:
            return  # about an older offer of ours that a newer one replaced
        del self._owned[event.atom]
        log.debug("%s taken over by another program", self._conn.atom_name(event.atom))
        state.offer.lost.set()

    def _on_request(self, event: Any) -> None:
        from Xlib import X
        from Xlib.protocol import event as xevent

        prop = event.property or event.target  # obsolete clients pass None
        state = self._owned.get(event.selection)
        ok = False
        if state is not None and (event.time == X.CurrentTime or event.time >= state.since):
            target = self._conn.atom_name(event.target)
            if target == "MULTIPLE":
                ok = self._serve_multiple(event.requestor, prop, state)
            else:
                ok = self._serve(event.requestor, target, prop, state)
        notify = xevent.SelectionNotify(
            time=event.time,
            requestor=event.requestor,
            selection=event.selection,
            target=event.target,
            property=prop if ok else X.NONE,
        )
        try:
            event.requestor.send_event(notify, event_mask=0)
            self._conn.flush()
        except Exception as exc:  # noqa: BLE001 - the requestor vanished
            log.debug("answering a clipboard request: %s", exc)

    def _serve(self, requestor: Any, target: str, prop: int, state: _State) -> bool:
        from Xlib import X, Xatom

        items = state.offer.snapshot.items
        counts = state.reader is None or self._client(requestor.id) == state.reader
        if counts:
            state.offer.note_request()
        if target == "TARGETS":
            atoms = [self._conn.atom(n) for n in ("TARGETS", "TIMESTAMP", "MULTIPLE")]
            atoms += [self._conn.atom(name) for name in items]
            requestor.change_property(prop, Xatom.ATOM, 32, atoms)
            return True
        if target == "TIMESTAMP":
            requestor.change_property(prop, Xatom.INTEGER, 32, [state.since])
            return True
        if target not in items or (counts and not state.offer.allows_read()):
            return False
        type_name, fmt, data = items[target]
        type_atom = self._conn.atom(type_name)
        if counts:
            state.offer.note_fetch()
        if isinstance(data, bytes) and len(data) > self._chunk:
            outgoing = _Outgoing(requestor, prop, type_atom, data)
            self._outgoing[(requestor.id, prop)] = outgoing
            requestor.change_attributes(event_mask=X.PropertyChangeMask)
            requestor.change_property(prop, self._conn.atom("INCR"), 32, [len(data)])
            return True
        requestor.change_property(prop, type_atom, fmt, list(data) if fmt != 8 else data)
        return True

    def _serve_multiple(self, requestor: Any, prop: int, state: _State) -> bool:
        from Xlib import X

        reply = requestor.get_property(prop, X.AnyPropertyType, 0, 2**16, False)
        if reply is None or reply.format != 32:
            return False
        pairs = list(reply.value)
        for index in range(0, len(pairs) - 1, 2):
            target_atom, target_prop = pairs[index], pairs[index + 1]
            name = self._conn.atom_name(target_atom)
            if not self._serve(requestor, name, target_prop, state):
                pairs[index + 1] = X.NONE
        requestor.change_property(prop, reply.property_type, 32, pairs)
        return True

    def _send_next_chunk(self, key: tuple[int, int], outgoing: _Outgoing) -> None:
        chunk = outgoing.data[outgoing.offset : outgoing.offset + self._chunk]
        outgoing.offset += len(chunk)
        try:
            outgoing.requestor.change_property(outgoing.prop, outgoing.type_atom, 8, chunk)
            self._conn.flush()
        except Exception as exc:  # noqa: BLE001 - the requestor vanished mid-transfer
            log.debug("incremental clipboard transfer: %s", exc)
            chunk = b""
        if not chunk:
            self._outgoing.pop(key, None)


async def _spawn_holder(selection: str, text: str) -> None:
    """Leave the text with xclip (or xsel), which keep serving it after we exit."""
    import shutil

    which = selection.lower()
    if shutil.which("xclip"):
        command = ["xclip", "-selection", which, "-i"]
    elif shutil.which("xsel"):
        command = ["xsel", f"--{which}", "--input"]
    else:
        log.warning("%s is lost at exit: install xclip or a clipboard manager", selection)
        return
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await asyncio.wait_for(process.communicate(text.encode("utf-8")), 3.0)
        log.info("%s handed to %s", selection, command[0])
    except TimeoutError:
        log.warning("%s could not be handed to %s", selection, command[0])


def _value(reply: Any) -> Value:
    value = reply.value
    if reply.format == 8:
        return bytes(value) if not isinstance(value, bytes) else value
    if isinstance(value, array | list | tuple):
        return tuple(int(v) for v in value)
    return tuple(value)

"""X selections (CLIPBOARD, PRIMARY): read every format, own and serve them, know who fetched.

Owning the selection ourselves (instead of handing text to xclip) tells us exactly when
the target application fetched the pasted text, so the user's clipboard is restored right
after that and never before; and a SelectionClear tells us when somebody else copied, so
we never restore over it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from anyfill.daemon.desktop.ports import ClipSnapshot, Offer, Value, Which, saved_or_refused
from anyfill.daemon.errors import InsertError
from anyfill.daemon.waiting import interruptible
from anyfill.daemon.x11.connection import XConnection

if TYPE_CHECKING:
    from anyfill.daemon.x11.keeper import Keeper

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
"""How long the owner may take for one answer (one format, one chunk of a transfer)."""
SNAPSHOT_BUDGET_S = 3.0
"""How long saving every format may take in all: longer, and the press stops."""
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024
"""The most a saved clipboard may hold, counted while it is read."""
SNAPSHOT_PARALLEL = 4
"""Formats asked for at once: an owner answering one at a time still answers each soon."""
TEXT_TARGETS = (
    "UTF8_STRING",
    "text/plain;charset=utf-8",
    "text/plain",
    "STRING",
    "TEXT",
    "COMPOUND_TEXT",
)
"""Read first: the formats a user pastes most, and what a snapshot must never lack."""
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

    def __init__(self, conn: XConnection, keeper: Keeper | None = None) -> None:
        from Xlib import X

        self._conn = conn
        self._keeper = keeper
        """Handed the user's content before we take a selection (None in the keeper)."""
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
        """Every format the current owner offers (our own offer is copied directly).

        Raises ClipboardUnreadable when a format it offered could not be read within the
        time and size limits: a partial copy, restored, would lose the rest (the text of
        an owner that lists it last). A cancel of the press ends the reading at once.
        """
        from Xlib import X

        selection = self._conn.atom(_NAMES[which])
        owner = int(getattr(self._conn.display.get_selection_owner(selection), "id", 0))
        mine = self._still_mine(selection, owner)
        if mine is not None:
            return mine.offer.snapshot
        if owner == X.NONE:
            snapshot = ClipSnapshot()
        else:
            async with interruptible():
                snapshot = await self._snapshot_of_owner(which, selection)
        # Whatever we take next, this is what the user should have if we die meanwhile.
        await self._keep(which, snapshot)
        return snapshot

    async def _keep(self, which: Which, snapshot: ClipSnapshot) -> None:
        if self._keeper is not None:
            await self._keeper.keep(which, snapshot)

    async def _snapshot_of_owner(self, which: Which, selection: int) -> ClipSnapshot:
        deadline = time.monotonic() + SNAPSHOT_BUDGET_S
        timestamp = await self._conn.server_time()
        got = await self._convert(selection, "TARGETS", timestamp, SNAPSHOT_TIMEOUT_S)
        if got is None or not isinstance(got[2], tuple):
            # An owner that cannot list its targets: keep at least its text.
            text = await self._read_target(selection, "UTF8_STRING", timestamp, 0.5)
            return saved_or_refused(
                which, 1, ClipSnapshot.from_text(text) if text is not None else ClipSnapshot()
            )
        names = [self._conn.atom_name(atom) for atom in got[2] if atom]
        wanted = read_order(name for name in dict.fromkeys(names) if name not in META_TARGETS)
        items, unread = await self._read_all(selection, wanted, timestamp, deadline)
        log.debug("saved %s: %d of %d formats", which, len(items), len(wanted))
        return saved_or_refused(which, len(wanted), ClipSnapshot(items), unread=unread)

    async def _read_all(
        self, selection: int, wanted: list[str], timestamp: int, deadline: float
    ) -> tuple[dict[str, tuple[str, int, Value]], list[str]]:
        """Read ``wanted`` in that order, a few at a time, within ``deadline`` and the
        size cap; returns what was read and what could not be (refusals are neither:
        the owner itself has nothing there, so nothing is lost)."""
        items: dict[str, tuple[str, int, Value]] = {}
        unread: list[str] = []
        budget = _Budget(SNAPSHOT_MAX_BYTES)
        queue = iter(wanted)

        async def worker() -> None:
            for name in queue:
                left = deadline - time.monotonic()
                if left <= 0 or budget.exhausted:
                    unread.append(name)
                    continue
                try:
                    result = await self._fetch(
                        selection,
                        name,
                        timestamp,
                        min(SNAPSHOT_TIMEOUT_S, left),
                        budget=budget,
                        deadline=deadline,
                    )
                except _NotRead as exc:
                    log.warning("clipboard format %s not saved: %s", name, exc)
                    unread.append(name)
                    continue
                if result is not None:
                    items[name] = result

        await asyncio.gather(*(worker() for _ in range(min(SNAPSHOT_PARALLEL, len(wanted)))))
        # In the owner's order (text first), whichever worker finished first.
        ordered = {name: items[name] for name in wanted if name in items}
        return ordered, [name for name in wanted if name in unread]

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
            await self._keep(which, snapshot)
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
        owner = int(getattr(self._conn.display.get_selection_owner(selection), "id", 0))
        mine = self._still_mine(selection, owner)
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
        SAVE_TARGETS, all formats), or else the keeper process takes it over (all
        formats), or without one xclip / xsel keeps the text."""
        kept = False
        for selection, state in list(self._owned.items()):
            name = self._conn.atom_name(selection)
            if name == "CLIPBOARD" and await self._save_to_manager():
                log.info("the clipboard manager took over the clipboard")
                continue
            if self._keeper is not None and self._keeper.alive:
                # Exactly what we serve, every format: the keeper claims it below.
                await self._keeper.keep(
                    "clipboard" if name == "CLIPBOARD" else "primary", state.offer.snapshot
                )
                if self._keeper.alive:
                    kept = True
                    continue
            text = state.offer.snapshot.text()
            if text is not None:
                await _spawn_holder(name, text)
        if kept and self._keeper is not None and not await self._keeper.take_over():
            log.info("the clipboard keeper takes over as our X connection closes")

    async def _save_to_manager(self) -> bool:
        manager = self._conn.atom("CLIPBOARD_MANAGER")
        if int(getattr(self._conn.display.get_selection_owner(manager), "id", 0)) == 0:
            return False
        prop = self._conn.atom("ANYFILL_SAVE")
        timestamp = await self._conn.server_time()
        return bool(await self._ask_owner(manager, "SAVE_TARGETS", prop, timestamp, 3.0))

    def _still_mine(self, selection: int, owner: int) -> _State | None:
        """Our offer of ``selection`` if the server says we still own it. Our record alone
        is not enough: the SelectionClear of a copy the user made just now may still be
        unread on the socket, and our stale copy would then be restored over theirs."""
        self._conn.schedule_pump()  # the reply wait may have queued that very event
        mine = self._owned.get(selection)
        if mine is None:
            return None
        if owner != self._conn.window.id:
            log.debug("%s changed hands (event not seen yet)", self._conn.atom_name(selection))
            del self._owned[selection]
            mine.offer.lost.set()
            return None
        return mine

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
        """Ask the owner for ``target`` into a fresh property and read the answer; None
        when it refused, did not answer in time or sent more than the cap."""
        try:
            return await self._fetch(
                selection,
                target,
                timestamp,
                timeout_s,
                budget=_Budget(SNAPSHOT_MAX_BYTES),
                deadline=time.monotonic() + SNAPSHOT_BUDGET_S,
            )
        except _NotRead as exc:
            log.debug("reading %s: %s", target, exc)
            return None

    async def _fetch(
        self,
        selection: int,
        target: str,
        timestamp: int,
        timeout_s: float,
        *,
        budget: _Budget,
        deadline: float,
    ) -> tuple[str, int, Value] | None:
        """``target``'s data, None when the owner refused it; raises _NotRead when it
        did not come within ``timeout_s`` (per step) and ``deadline``, or over ``budget``."""
        self._props += 1
        prop = self._conn.atom(f"ANYFILL_SEL_{self._props % 256}")
        answered = await self._ask_owner(selection, target, prop, timestamp, timeout_s)
        if answered is None:
            raise _NotRead(f"no answer within {timeout_s * 1000:.0f} ms")
        if not answered:
            return None
        return await self._read_property(prop, timeout_s, budget, deadline)

    async def _ask_owner(
        self, selection: int, target: str, prop: int, timestamp: int, timeout_s: float
    ) -> bool | None:
        """ConvertSelection: True when the owner answered into ``prop``, False when it
        refused, None when it did not answer in time."""
        from Xlib import X

        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._notify[prop] = future
        try:
            self._conn.window.convert_selection(selection, self._conn.atom(target), prop, timestamp)
            self._conn.flush()
            event = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            log.debug("no answer for %s", target)
            return None
        finally:
            self._notify.pop(prop, None)
        return bool(event.property != X.NONE)

    async def _read_property(
        self, prop: int, timeout_s: float, budget: _Budget, deadline: float
    ) -> tuple[str, int, Value] | None:
        """Read and delete the answer in ``prop``; an incremental (INCR) transfer chunk by
        chunk, the size checked before each read so that an endless one stops at the cap,
        and the time against ``deadline`` so that a dripping one stops there."""
        from Xlib import X

        window = self._conn.window
        key = (window.id, prop)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._prop_waiters[key] = queue
        try:
            reply = self._read_chunk(prop, budget)
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
                    left = min(timeout_s, deadline - time.monotonic())
                    if left <= 0:
                        raise _NotRead(f"the transfer took over {SNAPSHOT_BUDGET_S:.0f} s")
                    try:
                        event = await asyncio.wait_for(queue.get(), left)
                    except TimeoutError:
                        if time.monotonic() < deadline:
                            raise _NotRead("the incremental transfer stalled") from None
                        raise _NotRead(
                            f"the transfer took over {SNAPSHOT_BUDGET_S:.0f} s"
                        ) from None
                    if event.state == X.PropertyNewValue:
                        break
                chunk = self._read_chunk(prop, budget)
                if chunk is None or not chunk.value:
                    break
                type_name, fmt = self._conn.atom_name(chunk.property_type), chunk.format
                parts.append(_value(chunk))
            if fmt == 8:
                return type_name, 8, b"".join(p for p in parts if isinstance(p, bytes))
            return type_name, fmt, tuple(v for p in parts if isinstance(p, tuple) for v in p)
        finally:
            self._prop_waiters.pop(key, None)

    def _read_chunk(self, prop: int, budget: _Budget) -> Any:
        """The property's value, deleted; its size is asked first and taken from
        ``budget`` (raises _NotRead over it, the data left unread)."""
        from Xlib import X

        window = self._conn.window
        size = window.get_property(prop, X.AnyPropertyType, 0, 0, False)
        if size is None:
            return None
        budget.take(size.bytes_after)
        reply = window.get_property(prop, X.AnyPropertyType, 0, 2**29, True)
        self._conn.flush()
        return reply

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
        log.debug(
            "request %s for %s by 0x%x at %d (ours since %s): %s",
            self._conn.atom_name(event.target),
            self._conn.atom_name(event.selection),
            event.requestor.id,
            event.time,
            state.since if state is not None else "-",
            "served" if ok else "refused",
        )
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


def read_order(names: Iterable[str]) -> list[str]:
    """Text formats first (the known ones in :data:`TEXT_TARGETS` order, then other
    ``text/*``), then the rest as offered."""
    offered = list(names)
    known = [name for name in TEXT_TARGETS if name in offered]
    other_text = [n for n in offered if n.startswith("text/") and n not in TEXT_TARGETS]
    first = set(known) | set(other_text)
    return known + other_text + [name for name in offered if name not in first]


class _NotRead(Exception):
    """A format the owner offered could not be read within the limits."""


class _Budget:
    """Bytes a snapshot may still take."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    @property
    def exhausted(self) -> bool:
        return self.left < 0

    def take(self, size: int) -> None:
        if size > self.left:
            self.left = -1
            raise _NotRead(f"the clipboard holds over {SNAPSHOT_MAX_BYTES // 2**20} MiB")
        self.left -= size


def _value(reply: Any) -> Value:
    value = reply.value
    if reply.format == 8:
        return bytes(value) if not isinstance(value, bytes) else value
    if isinstance(value, array | list | tuple):
        return tuple(int(v) for v in value)
    return tuple(value)

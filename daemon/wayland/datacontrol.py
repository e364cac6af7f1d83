"""The clipboard through the compositor's data-control protocol, spoken natively.

``ext_data_control_v1`` (newer compositors) or ``zwlr_data_control_manager_v1`` (wlroots,
KWin; version 2 carries the primary selection) lets a client without a window read and
set a seat's CLIPBOARD and PRIMARY. Spoken on our own connection (rather than through
wl-clipboard's processes) it gives what the X11 route has:

- every format: a snapshot reads each offered MIME type (into a pipe, bounded in size and
  time), and a restore offers them all again and serves each from the daemon;
- reads are seen: the compositor forwards every paste of our offer as a ``send`` event, so
  ``Offer.fetched`` is the application's real read, not a timer;
- ownership is seen: ``cancelled`` means another client set the selection (we stop serving
  and never take it back), and the device's selection events tell who holds it now.

A read cannot be tied to a client (the protocol does not say who reads): a clipboard
manager that reads every new clipboard counts as a reader too.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from anyfill.daemon.desktop.ports import ClipSnapshot, Offer, Value, Which, saved_or_refused
from anyfill.daemon.errors import DesktopUnavailable, InsertError
from anyfill.daemon.wayland.connection import (
    ConnectionLost,
    WaylandConnection,
    handler,
    list_globals,
    pywayland_missing,
)

log = logging.getLogger("anyfill.wayland.datacontrol")

SNAPSHOT_TIMEOUT_S = 1.0
"""A format its owner has not finished writing by then is skipped (the others are kept)."""
TYPE_MAX_BYTES = 32 * 1024 * 1024
SNAPSHOT_MAX_BYTES = 64 * 1024 * 1024
SEND_TIMEOUT_S = 5.0
"""A reader that has not taken our data by then is given up on (its pipe is closed)."""
CHUNK = 64 * 1024

# Names that describe a selection rather than carry its data (Xwayland bridges X's).
META_TYPES = frozenset(
    {"TARGETS", "MULTIPLE", "TIMESTAMP", "DELETE", "SAVE_TARGETS", "INSERT_SELECTION"}
)
TEXT_TYPES = ("text/plain;charset=utf-8", "UTF8_STRING", "text/plain", "TEXT", "STRING")


@dataclass(frozen=True)
class Family:
    """One of the two interchangeable protocols: the same messages under other names."""

    label: str
    manager: type[Any]
    max_version: int
    primary_since: int
    """The manager version that brings the primary selection."""


def families() -> list[Family]:
    """The protocols this pywayland can speak, best first."""
    from pywayland.protocol.ext_data_control_v1 import ExtDataControlManagerV1

    from anyfill.daemon.wayland.protocols.wlr_data_control_unstable_v1 import (
        ZwlrDataControlManagerV1,
    )

    return [
        Family("ext-data-control-v1", ExtDataControlManagerV1, 1, 1),
        Family("wlr-data-control-unstable-v1", ZwlrDataControlManagerV1, 2, 2),
    ]


def choose_family(offered: dict[str, int]) -> tuple[Family, int] | None:
    """The protocol to use among the compositor's globals (name -> version), and the
    version to bind; ext is preferred where both exist."""
    for family in families():
        version = offered.get(family.manager.name)
        if version:
            return family, min(version, family.max_version)
    return None


def wanted_types(offered: Iterable[str]) -> list[str]:
    """The MIME types a snapshot keeps: each one offered, once, in the owner's order, less
    the names that only describe the selection."""
    return [mime for mime in dict.fromkeys(offered) if mime and mime not in META_TYPES]


def text_type(offered: Sequence[str]) -> str | None:
    """The type to read text as: UTF-8 first."""
    for mime in TEXT_TYPES:
        if mime in offered:
            return mime
    return next((mime for mime in offered if mime.startswith("text/plain")), None)


@dataclass
class Budget:
    """Size limits of one snapshot: each format, and all of them together."""

    per_type: int = TYPE_MAX_BYTES
    total: int = SNAPSHOT_MAX_BYTES
    used: int = 0

    def admit(self, mime: str, size: int) -> bool:
        """Whether a format of ``size`` bytes is kept (then it counts against the total)."""
        if size > self.per_type:
            log.warning("clipboard format %s skipped: %d bytes, over %d", mime, size, self.per_type)
            return False
        if self.used + size > self.total:
            log.warning(
                "clipboard format %s skipped: the snapshot would exceed %d bytes", mime, self.total
            )
            return False
        self.used += size
        return True


@dataclass
class _Incoming:
    """A selection another client (or our own source, seen from the device) offers."""

    proxy: Any
    mimes: list[str] = field(default_factory=list)


@dataclass
class _Serving:
    """Our source on one selection: what it serves, and the ownership it stands for."""

    which: Which
    proxy: Any
    offer: Offer
    data: dict[str, bytes]
    replaced: bool = False
    """We set a newer source (or cleared the selection): its cancel is ours, not a loss."""
    cancelled: bool = False


class DataControlClipboard:
    """The :class:`~anyfill.daemon.desktop.ports.Clipboard` port over data-control."""

    def __init__(self, conn: WaylandConnection) -> None:
        self._conn = conn
        picked = choose_family({name: info.version for name, info in conn.globals.items()})
        if picked is None:
            raise DesktopUnavailable("the compositor offers no data-control protocol")
        self.family, self._version = picked
        self._manager: Any = None
        self._seat: Any = None
        self._device: Any = None
        self._current: dict[Which, _Incoming | None] = {"clipboard": None, "primary": None}
        self._pending: dict[int, _Incoming] = {}
        self._serving: dict[Which, _Serving] = {}
        self._old: list[_Serving] = []
        """Sources replaced by newer ones, kept until the compositor cancels them."""
        self._writers: set[asyncio.Task[None]] = set()
        self._primary = False
        """The compositor announced a primary selection (it may have none)."""
        self._finished = ""

    @property
    def route(self) -> str:
        return f"data-control ({self.family.label} v{self._version}, native: every format)"

    @property
    def has_primary(self) -> bool:
        return self._primary

    async def __aenter__(self) -> DataControlClipboard:
        from pywayland.protocol.wayland import WlSeat

        self._seat = self._conn.bind(WlSeat, 1)
        if self._seat is None:
            raise DesktopUnavailable("the compositor has no seat")
        self._manager = self._conn.bind(self.family.manager, self._version)
        device = self._manager.get_data_device(self._seat)
        device.dispatcher["data_offer"] = handler(self._on_data_offer)
        device.dispatcher["selection"] = handler(self._on_selection)
        device.dispatcher["finished"] = handler(self._on_finished)
        if self._version >= self.family.primary_since:
            device.dispatcher["primary_selection"] = handler(self._on_primary)
        self._device = device
        self._conn.on_lost(self._on_lost)
        try:
            await self._conn.roundtrip()  # the current selections arrive on binding
        except (ConnectionLost, TimeoutError) as exc:
            raise DesktopUnavailable(f"data-control did not answer: {exc}") from exc
        log.debug("data-control via %s v%d", self.family.label, self._version)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in list(self._writers):
            task.cancel()
        if self._writers:
            await asyncio.gather(*self._writers, return_exceptions=True)
        if self._conn.error:
            return
        for serving in [*self._serving.values(), *self._old]:
            serving.proxy.destroy()
        for incoming in [*self._pending.values(), *self._current.values()]:
            if incoming is not None and not incoming.proxy.destroyed:
                incoming.proxy.destroy()
        self._device.destroy()
        self._manager.destroy()
        with contextlib.suppress(ConnectionLost):
            self._conn.flush()

    def serving(self) -> dict[Which, ClipSnapshot]:
        """What we still serve (the user's restored clipboard), for a hand-over at exit."""
        return {
            which: serving.offer.snapshot
            for which, serving in self._serving.items()
            if not serving.cancelled
        }

    # -- ports -----------------------------------------------------------------------

    async def snapshot(self, which: Which) -> ClipSnapshot:
        self._usable()
        mine = self._live(which)
        if mine is not None:
            return mine.offer.snapshot
        incoming = self._current[which]
        if incoming is None:
            return ClipSnapshot()
        mimes = wanted_types(incoming.mimes)
        datas = await asyncio.gather(
            *(self._receive(incoming, mime, SNAPSHOT_TIMEOUT_S, TYPE_MAX_BYTES) for mime in mimes)
        )
        budget = Budget()
        items: dict[str, tuple[str, int, Value]] = {}
        for mime, data in zip(mimes, datas, strict=True):
            if data is not None and budget.admit(mime, len(data)):
                items[mime] = (mime, 8, data)
        log.debug(
            "saved %s: %d of %d formats, %d bytes", which, len(items), len(mimes), budget.used
        )
        return saved_or_refused(which, len(mimes), ClipSnapshot(items))

    async def offer(self, which: Which, snapshot: ClipSnapshot, reader: int | None = None) -> Offer:
        # ``reader`` cannot be honoured: a send event does not say who reads.
        serving = await self._own(which, snapshot)
        if serving is None:
            # A compositor without a primary selection: nothing to own, nothing will read.
            return Offer(snapshot)
        return serving.offer

    async def restore(
        self,
        which: Which,
        snapshot: ClipSnapshot,
        reader: int | None = None,
        as_of: Offer | None = None,
    ) -> Offer | None:
        # ``as_of`` has no meaning here: a Wayland selection carries no time. Callers
        # check ``Offer.lost`` (another client copied) before putting the user's content
        # back; a loss this instant cannot be seen before the request.
        self._usable()
        if snapshot.empty:
            await self._own(which, None)
            return None
        serving = await self._own(which, snapshot)
        if serving is None:
            return None
        dropped = [mime for mime in snapshot.items if mime not in serving.data]
        if dropped:
            log.info("could not restore %s formats %s (not bytes)", which, dropped)
        return serving.offer

    async def read_text(self, which: Which, timeout_s: float) -> str | None:
        self._usable()
        mine = self._live(which)
        if mine is not None:
            return mine.offer.snapshot.text()
        incoming = self._current[which]
        if incoming is None:
            return None
        mime = text_type(incoming.mimes)
        if mime is None:
            return None
        data = await self._receive(incoming, mime, timeout_s, TYPE_MAX_BYTES)
        if data is None:
            return None
        return data.decode("latin-1" if mime == "STRING" else "utf-8", "replace")

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        return False  # the protocol does not say which client owns a selection

    def holder(self, which: Which) -> Literal["us", "nobody", "other"]:
        if self._live(which) is not None:
            return "us"
        return "nobody" if self._current[which] is None else "other"

    # -- owning a selection --------------------------------------------------------------

    async def _own(self, which: Which, snapshot: ClipSnapshot | None) -> _Serving | None:
        """Set ``which`` to our new source serving ``snapshot`` (None clears it)."""
        self._usable()
        if which == "primary" and not self._primary:
            return None
        source = None
        serving = None
        if snapshot is not None:
            data = {
                mime: value
                for mime, (_, _, value) in snapshot.items.items()
                if isinstance(value, bytes)
            }
            source = self._manager.create_data_source()
            for mime in data:
                source.offer(mime)
            serving = _Serving(which, source, Offer(snapshot), data)
            source.dispatcher["send"] = handler(self._sender(serving))
            source.dispatcher["cancelled"] = handler(self._canceller(serving))
        previous = self._serving.pop(which, None)
        if previous is not None:
            previous.replaced = True
            if not previous.cancelled:
                self._old.append(previous)
        if serving is not None:
            self._serving[which] = serving
        if which == "clipboard":
            self._device.set_selection(source)
        else:
            self._device.set_primary_selection(source)
        try:
            # Once the compositor handled it, a paste reads our source.
            await self._conn.roundtrip()
        except (ConnectionLost, TimeoutError) as exc:
            raise InsertError(f"the compositor did not take the {which} selection: {exc}") from exc
        return serving

    def _live(self, which: Which) -> _Serving | None:
        serving = self._serving.get(which)
        return serving if serving is not None and not serving.cancelled else None

    def _sender(self, serving: _Serving) -> Any:
        def on_send(_source: Any, mime: str, fd: int) -> None:
            offer = serving.offer
            offer.note_request()
            data = serving.data.get(mime)
            if data is None or not offer.allows_read():
                os.close(fd)
                return
            offer.note_fetch()
            task = asyncio.get_running_loop().create_task(_write(fd, data, SEND_TIMEOUT_S))
            self._writers.add(task)
            task.add_done_callback(self._writers.discard)

        return on_send

    def _canceller(self, serving: _Serving) -> Any:
        def on_cancelled(_source: Any) -> None:
            serving.cancelled = True
            if not serving.replaced:
                log.debug("%s taken by another client", serving.which)
                serving.offer.lost.set()
            if serving in self._old:
                self._old.remove(serving)
            if self._serving.get(serving.which) is serving:
                del self._serving[serving.which]
            serving.proxy.destroy()

        return on_cancelled

    # -- the device's events ---------------------------------------------------------------

    def _on_data_offer(self, _device: Any, proxy: Any) -> None:
        self._conn.adopt(proxy)
        incoming = _Incoming(proxy)
        proxy.dispatcher["offer"] = handler(lambda _p, mime: incoming.mimes.append(mime))
        self._pending[id(proxy)] = incoming

    def _on_selection(self, _device: Any, proxy: Any | None) -> None:
        self._set_current("clipboard", proxy)

    def _on_primary(self, _device: Any, proxy: Any | None) -> None:
        self._primary = True
        self._set_current("primary", proxy)

    def _set_current(self, which: Which, proxy: Any | None) -> None:
        old = self._current[which]
        if old is not None and old.proxy is not proxy:
            old.proxy.destroy()
        self._current[which] = None if proxy is None else self._pending.pop(id(proxy), None)
        if proxy is not None and self._current[which] is None:
            self._current[which] = _Incoming(proxy)
        # An offer is announced right before its selection event: any other still
        # pending was never used.
        for stale in self._pending.values():
            stale.proxy.destroy()
        self._pending.clear()

    def _on_finished(self, _device: Any) -> None:
        self._finished = "the compositor ended our data-control device"
        log.warning("%s", self._finished)

    def _on_lost(self, reason: str) -> None:
        for serving in self._serving.values():
            serving.cancelled = True
            serving.offer.lost.set()

    def _usable(self) -> None:
        problem = self._conn.error or self._finished
        if problem:
            raise InsertError(f"the Wayland clipboard is gone: {problem}")

    # -- pipes ---------------------------------------------------------------------------

    async def _receive(
        self, incoming: _Incoming, mime: str, timeout_s: float, limit: int
    ) -> bytes | None:
        """One format of ``incoming``; None (with a log line) when its owner is too slow, it
        is larger than ``limit``, or the selection changed hands meanwhile."""
        if incoming.proxy.destroyed:
            log.info("clipboard format %s skipped: the selection changed meanwhile", mime)
            return None
        # Only our end is non-blocking: the flag belongs to each end's open file, and the
        # owner's may expect a blocking pipe (a partial write would cut its data short).
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(read_fd, False)
        try:
            incoming.proxy.receive(mime, write_fd)  # libwayland sends a duplicate
            self._conn.flush()
        finally:
            os.close(write_fd)
        try:
            return await _read(read_fd, mime, timeout_s, limit)
        finally:
            os.close(read_fd)


async def _read(fd: int, mime: str, timeout_s: float, limit: int) -> bytes | None:
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    size = 0
    done: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        nonlocal size
        while True:
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            except OSError as exc:
                if not done.done():
                    done.set_exception(exc)
                return
            if not chunk:
                if not done.done():
                    done.set_result(None)
                return
            chunks.append(chunk)
            size += len(chunk)
            if size > limit and not done.done():
                done.set_result(None)
                return

    loop.add_reader(fd, on_readable)
    try:
        async with asyncio.timeout(timeout_s):
            await done
    except TimeoutError:
        log.info("clipboard format %s skipped: not written within %.1f s", mime, timeout_s)
        return None
    except OSError as exc:
        log.info("clipboard format %s skipped: %s", mime, exc)
        return None
    finally:
        loop.remove_reader(fd)
    if size > limit:
        log.warning("clipboard format %s skipped: over %d bytes", mime, limit)
        return None
    return b"".join(chunks)


async def _write(fd: int, data: bytes, timeout_s: float) -> None:
    """Serve ``data`` into a reader's pipe without blocking the loop, then close it."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    done: asyncio.Future[None] = loop.create_future()

    def on_writable() -> None:
        nonlocal view
        while view:
            try:
                written = os.write(fd, view[:CHUNK])
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    log.debug("serving the clipboard failed: %s", exc)
                break
            view = view[written:]
        if not done.done():
            done.set_result(None)

    try:
        os.set_blocking(fd, False)
        loop.add_writer(fd, on_writable)
        try:
            async with asyncio.timeout(timeout_s):
                await done
        except TimeoutError:
            log.info("a clipboard reader took no data for %.1f s; closing its pipe", timeout_s)
        finally:
            loop.remove_writer(fd)
    finally:
        os.close(fd)


__all__ = [
    "Budget",
    "DataControlClipboard",
    "Family",
    "choose_family",
    "families",
    "native_route",
    "open_native_clipboard",
    "text_type",
    "wanted_types",
]


async def open_native_clipboard(
    stack: AsyncExitStack, conn: WaylandConnection | None, why_no_conn: str = ""
) -> tuple[DataControlClipboard | None, str]:
    """The native data-control clipboard on the daemon's connection, entered on ``stack``;
    or None and why not (no connection, no data-control protocol), for the fallback."""
    if conn is None:
        return None, why_no_conn or "no Wayland connection"
    if choose_family({name: info.version for name, info in conn.globals.items()}) is None:
        return None, "the compositor offers neither ext-data-control-v1 nor wlr-data-control"
    try:
        clipboard = await stack.enter_async_context(DataControlClipboard(conn))
    except DesktopUnavailable as exc:
        return None, str(exc)
    stack.push_async_callback(_hand_over, clipboard)
    return clipboard, ""


async def _hand_over(clipboard: DataControlClipboard) -> None:
    """At exit, what we serve (the user's restored clipboard) would vanish with us: a
    wl-copy server keeps its text (one format) where wl-clipboard is installed."""
    from anyfill.daemon.wayland.clipboard import hand_over

    for which, snapshot in clipboard.serving().items():
        try:
            await hand_over(which, snapshot)
        except InsertError as exc:
            log.warning("could not hand the %s over to wl-copy: %s", which, exc)


def native_route(environ: Mapping[str, str]) -> tuple[str, str]:
    """For ``doctor`` (a short blocking probe): the native route this session would take,
    or '' and why not."""
    missing = pywayland_missing()
    if missing:
        return "", missing + "; pip install pywayland"
    picked = choose_family(list_globals(environ))
    if picked is None:
        return "", "the compositor offers no data-control protocol"
    family, version = picked
    return f"data-control ({family.label} v{version}, native): every format kept", ""

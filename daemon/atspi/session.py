"""The process's one AT-SPI session: one thread, one lock, one bus check.

libatspi is not thread-safe, and it keeps process-wide state (its connection to the
accessibility bus, one peer connection per application, a cache of the tree). Every call
into it goes through :meth:`AtspiSession.call` (or :meth:`~AtspiSession.call_blocking`),
which runs the work on the session's thread while holding its lock. libatspi's objects
stay on that thread too: the last reference to one, dropped elsewhere, would run
libatspi's dispose there. So a result that holds one is refused, and an exception raised
by the work leaves its frames' locals behind on the thread.

libatspi attaches its bus connection to GLib's *default* main context, and whatever
iterates that context dispatches it: an application that closes is then disposed of on
that thread while ours walks its tree (Qt's GLib event dispatcher did this on the tray's
GUI thread: a segfault in libatspi). The session moves the connection to a context of
its own and dispatches it itself, on its thread, before each call. libatspi still puts
the peer connections it opens later to applications on the default context, so a host
must not iterate it either: the tray runs Qt without its GLib dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger("anyfill.atspi")

T = TypeVar("T")

RETRY_BUS_S = 3.0
"""A missing accessibility bus (or PyGObject) is looked for again after this long: each
look is one D-Bus round trip (one import), and accessibility switched on while anyfill
runs is then used from the next press on, without a restart."""
MAX_DISPATCH = 200
"""Messages dispatched before a call at most, so a flood cannot hold the press."""


class NoAccessibility(Exception):
    """AT-SPI cannot be used right now: not installed, or no accessibility bus."""


def load_atspi() -> tuple[Any, str]:
    """The Atspi module, or None and the reason it is missing."""
    try:
        import gi  # type: ignore[import-untyped, import-not-found, unused-ignore]

        gi.require_version("Atspi", "2.0")
        from gi.repository import Atspi  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except (ImportError, ValueError) as exc:
        return None, f"AT-SPI is not installed ({exc}); install PyGObject and gir1.2-atspi-2.0"
    return Atspi, ""


class AtspiSession:
    """Runs work on libatspi on the one AT-SPI thread; ``work`` receives the Atspi module."""

    def __init__(self) -> None:
        self.atspi, self.unavailable = load_atspi()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="anyfill-atspi")
        self._lock = threading.Lock()
        self._context: Any = None
        self._no_bus = ""
        self._bus_retry_at = 0.0
        self._load_retry_at = time.monotonic() + RETRY_BUS_S

    def _loaded(self) -> bool:
        """Whether libatspi can be called; PyGObject installed since the start is found."""
        if self.atspi is None and time.monotonic() >= self._load_retry_at:
            self._load_retry_at = time.monotonic() + RETRY_BUS_S
            self.atspi, self.unavailable = load_atspi()
        return self.atspi is not None

    async def call(self, work: Callable[[Any], T], within: float) -> T:
        """``work(Atspi)`` on the AT-SPI thread. :class:`TimeoutError` after ``within``
        seconds (the work still runs to its end: later calls queue behind it);
        :class:`NoAccessibility` when there is no AT-SPI to call."""
        if not self._loaded():
            raise NoAccessibility(self.unavailable)
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(self._thread, self._run, work), within)

    def call_blocking(self, work: Callable[[Any], T], within: float) -> T:
        """:meth:`call` for a caller that is not a coroutine; it waits for the thread."""
        if not self._loaded():
            raise NoAccessibility(self.unavailable)
        return self._thread.submit(self._run, work).result(within)

    def _run(self, work: Callable[[Any], T]) -> T:
        with self._lock:
            self._connect()
            self._dispatch()
            try:
                result = work(self.atspi)
            except BaseException as exc:
                # The frames of the work hold the nodes it used: released here, not where
                # the caller drops the exception.
                _clear_frames(exc)
                raise
            if _holds_gobject(result):
                name = type(result).__name__
                del result  # its objects die here, on the session's thread
                raise TypeError(f"an AT-SPI call returned a GObject (in a {name}): keep it here")
            return result

    def _connect(self) -> None:
        """Once: check the bus (libatspi aborts the process with g_error when it cannot
        reach it), connect, and take the connection off GLib's default context."""
        if self._context is not None:
            return
        if time.monotonic() < self._bus_retry_at:
            raise NoAccessibility(self._no_bus)
        problem = accessibility_bus_problem()
        if problem:
            self._no_bus = problem
            self._bus_retry_at = time.monotonic() + RETRY_BUS_S
            raise NoAccessibility(problem)
        from gi.repository import GLib  # type: ignore[import-untyped, import-not-found, unused-ignore]

        self.atspi.init()
        context = GLib.MainContext.new()
        self.atspi.set_main_context(context)
        self._context = context

    def _dispatch(self) -> None:
        """What arrived since the last call (applications that closed, tree changes),
        handled here on our thread before we use the tree."""
        for _ in range(MAX_DISPATCH):
            if not self._context.iteration(False):
                return


def _holds_gobject(value: object, depth: int = 3) -> bool:
    """Whether ``value`` is a GObject or holds one in a tuple, list, set or dict."""
    from gi.repository import GObject  # type: ignore[import-untyped, import-not-found, unused-ignore]

    if isinstance(value, GObject.Object):
        return True
    if depth <= 0:
        return False
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, tuple | list | set | frozenset):
        return any(_holds_gobject(item, depth - 1) for item in value)
    return False


def _clear_frames(exc: BaseException) -> None:
    """The locals of every frame ``exc`` (and the exceptions it chains) went through."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]


_shared: list[AtspiSession] = []
_shared_lock = threading.Lock()


def shared_session() -> AtspiSession:
    """The process's one session (libatspi's state is process-wide)."""
    with _shared_lock:
        if not _shared:
            _shared.append(AtspiSession())
        return _shared[0]


def accessibility_bus_problem() -> str:
    """Why libatspi could not connect right now ('' when it can), found in its order:
    ``AT_SPI_BUS_ADDRESS``, the X root window's ``AT_SPI_BUS``, ``org.a11y.Bus`` on the
    session bus."""
    from gi.repository import Gio, GLib  # type: ignore[import-untyped, import-not-found, unused-ignore]

    address = os.environ.get("AT_SPI_BUS_ADDRESS", "") or _x11_bus_address()
    if not address:
        try:
            session = Gio.bus_get_sync(Gio.BusType.SESSION, None)
            reply = session.call_sync(
                "org.a11y.Bus",
                "/org/a11y/bus",
                "org.a11y.Bus",
                "GetAddress",
                None,
                GLib.VariantType("(s)"),
                Gio.DBusCallFlags.NONE,
                500,
                None,
            )
            address = str(reply.unpack()[0])
        except GLib.Error as exc:
            return f"no accessibility bus (at-spi-bus-launcher is not running: {exc.message})"
    try:
        flags = (
            Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT
            | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
        )
        Gio.DBusConnection.new_for_address_sync(address, flags, None, None).close_sync(None)
    except GLib.Error as exc:
        return f"cannot connect to the accessibility bus: {exc.message}"
    return ""


def _x11_bus_address() -> str:
    # libatspi reads the root window only on X11 proper (not with WAYLAND_DISPLAY set).
    if not os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return ""
    from Xlib import X, display, error

    try:
        conn = display.Display()
    except (error.DisplayError, OSError):
        return ""
    try:
        prop = conn.screen().root.get_full_property(
            conn.intern_atom("AT_SPI_BUS"), X.AnyPropertyType
        )
        return bytes(prop.value).decode("utf-8", "replace") if prop is not None else ""
    finally:
        conn.close()

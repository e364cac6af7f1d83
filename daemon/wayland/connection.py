"""One client connection to the compositor (pywayland) for the daemon's life, on asyncio.

Every proxy is destroyed explicitly on the loop's thread, never left to the garbage
collector: cffi would free it on whichever thread collects, while the loop is inside
libwayland.

The display's fd is watched with ``loop.add_reader``: whatever arrived is read and its
events dispatched right there, so handlers run on the loop like any callback. Requests are
buffered by libwayland; :meth:`WaylandConnection.flush` sends them (call it after each
batch). :meth:`WaylandConnection.roundtrip` waits, without blocking the loop, until the
compositor handled everything sent so far and we saw the events it caused.

pywayland is imported lazily: without it (another platform, a partial install) the
caller falls back to another route.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import select
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from anyfill.daemon.errors import DesktopUnavailable
from anyfill.daemon.wayland.session import display_path

if TYPE_CHECKING:
    from pywayland.client.display import Display
    from pywayland.protocol.wayland import WlRegistryProxy

log = logging.getLogger("anyfill.wayland.connection")

ROUNDTRIP_TIMEOUT_S = 2.0
R = TypeVar("R")


class ConnectionLost(Exception):
    """The compositor closed our connection, or a protocol error ended it."""


@dataclass(frozen=True)
class GlobalInfo:
    name: int
    version: int


def pywayland_missing() -> str:
    """Why pywayland cannot be used here ('' when it can)."""
    try:
        import pywayland.client.display  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"pywayland is not installed ({exc})"
    return ""


def handler(func: Callable[..., R]) -> Callable[..., R | None]:
    """An event handler whose exception is logged (pywayland would print it to stderr and
    drop it)."""

    @functools.wraps(func)
    def wrapper(*args: Any) -> R | None:
        try:
            return func(*args)
        except Exception:
            log.exception("handling a Wayland event failed")
            return None

    return wrapper


class WaylandConnection:
    """``async with WaylandConnection(environ) as conn:``; ``conn.globals`` names what the
    compositor offers, ``conn.bind`` takes one."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.path = display_path(environ)
        self.globals: dict[str, GlobalInfo] = {}
        self.error = ""
        """Why the connection ended ('' while it is up)."""
        self._display: Display | None = None
        self._registry: WlRegistryProxy | None = None
        self._fd = -1
        self._writing = False
        self._on_lost: list[Callable[[str], None]] = []

    @property
    def display(self) -> Display:
        if self._display is None or self.error:
            raise ConnectionLost(self.error or "not connected")
        return self._display

    async def __aenter__(self) -> WaylandConnection:
        missing = pywayland_missing()
        if missing:
            raise DesktopUnavailable(missing)
        from pywayland.client.display import Display

        display = Display(str(self.path))
        try:
            display.connect()
        except ValueError as exc:
            raise DesktopUnavailable(f"cannot connect to the Wayland display {self.path}") from exc
        self._display = display
        self._fd = display.get_fd()
        asyncio.get_running_loop().add_reader(self._fd, self._on_readable)
        registry = display.get_registry()
        registry.dispatcher["global"] = handler(self._on_global)
        registry.dispatcher["global_remove"] = handler(self._on_global_remove)
        self._registry = registry
        try:
            await self.roundtrip()
        except (ConnectionLost, TimeoutError) as exc:
            await self.__aexit__(None, None, None)
            raise DesktopUnavailable(f"the Wayland display did not answer: {exc}") from exc
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._display is None:
            return
        loop = asyncio.get_running_loop()
        if self._fd >= 0:
            loop.remove_reader(self._fd)
            loop.remove_writer(self._fd)
        if not self.error:
            self.flush()
        self._forget_registry()
        self._display.disconnect()
        self._display = None
        self._fd = -1

    def adopt(self, proxy: Any) -> None:
        """Tie a proxy the compositor created (a ``new_id`` in an event) to this display.
        pywayland gives such proxies the display of whichever registry it finds first,
        which may be another, closed connection's: their destroy would then not free the
        id, and the compositor's next object with that id would kill this connection."""
        proxy._display = self.display

    def _forget_registry(self) -> None:
        """Drop our registry from pywayland's table of live registries (see ``adopt``)."""
        from pywayland.protocol.wayland import WlRegistry

        for key, registry in list(WlRegistry.registry.items()):
            if registry is self._registry:
                del WlRegistry.registry[key]
        self._registry = None

    def on_lost(self, callback: Callable[[str], None]) -> None:
        self._on_lost.append(callback)

    def bind(self, interface: type[Any], max_version: int) -> Any:
        """The proxy of the global ``interface`` (at most ``max_version``); None when the
        compositor has none."""
        info = self.globals.get(interface.name)
        if info is None or self._registry is None:
            return None
        version = min(info.version, max_version)
        return self._registry.bind(info.name, interface, version)

    def flush(self) -> None:
        """Send the buffered requests; when the socket is full, again once it drains."""
        display = self.display
        if display.flush() >= 0:
            return
        if self._check_error():
            return
        if not self._writing:
            self._writing = True
            asyncio.get_running_loop().add_writer(self._fd, self._on_writable)

    async def roundtrip(self, timeout_s: float = ROUNDTRIP_TIMEOUT_S) -> None:
        """Until the compositor handled every request sent so far (and we its events)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_done(_callback: Any, _data: int) -> None:
            if not done.done():
                done.set_result(None)

        def on_lost(reason: str) -> None:
            if not done.done():
                done.set_exception(ConnectionLost(reason))

        callback = self.display.sync()
        callback.dispatcher["done"] = handler(on_done)
        self._on_lost.append(on_lost)
        try:
            self.flush()
            async with asyncio.timeout(timeout_s):
                await done
        finally:
            self._on_lost.remove(on_lost)
            # Freed here, on the loop: left to the garbage collector it could be freed on
            # whatever thread collects, racing libwayland's lock.
            if not self.error:
                callback.destroy()

    # -- the loop's side ---------------------------------------------------------------

    def _on_readable(self) -> None:
        display = self._display
        if display is None:
            return
        try:
            display.read()
            display.dispatch(block=False)
        except RuntimeError as exc:
            self._lose(f"reading from the compositor failed: {exc}")
            return
        self._check_error()

    def _on_writable(self) -> None:
        display = self._display
        if display is None:
            return
        if display.flush() >= 0:
            asyncio.get_running_loop().remove_writer(self._fd)
            self._writing = False
        else:
            self._check_error()

    def _check_error(self) -> bool:
        from pywayland import lib

        display = self._display
        if display is None or display._ptr is None:
            return True
        code = lib.wl_display_get_error(display._ptr)
        if code:
            self._lose(f"the Wayland connection failed (error {code})")
        return bool(code)

    def _lose(self, reason: str) -> None:
        if self.error:
            return
        self.error = reason
        log.warning("%s", reason)
        loop = asyncio.get_running_loop()
        if self._fd >= 0:
            loop.remove_reader(self._fd)
            loop.remove_writer(self._fd)
        for callback in list(self._on_lost):
            callback(reason)

    def _on_global(self, _registry: Any, name: int, interface: str, version: int) -> None:
        self.globals.setdefault(interface, GlobalInfo(name, version))

    def _on_global_remove(self, _registry: Any, name: int) -> None:
        for interface, info in list(self.globals.items()):
            if info.name == name:
                del self.globals[interface]


async def open_connection(
    stack: AsyncExitStack, environ: Mapping[str, str]
) -> tuple[WaylandConnection | None, str]:
    """The daemon's connection, entered on ``stack`` (closed with it); or None and why."""
    missing = pywayland_missing()
    if missing:
        return None, missing
    try:
        return await stack.enter_async_context(WaylandConnection(environ)), ""
    except DesktopUnavailable as exc:
        return None, str(exc)


def list_globals(environ: Mapping[str, str]) -> dict[str, int]:
    """The compositor's globals and their versions, by a short blocking connection (for
    ``doctor``); empty when pywayland or the display is missing."""
    if pywayland_missing():
        return {}
    from pywayland.client.display import Display

    found: dict[str, int] = {}

    def on_global(_registry: Any, _name: int, interface: str, version: int) -> None:
        found.setdefault(interface, version)

    display = Display(str(display_path(environ)))
    try:
        display.connect()
    except ValueError:
        return {}
    try:
        registry = display.get_registry()
        registry.dispatcher["global"] = on_global
        # Bounded: a display that takes the connection but never answers (a hung
        # compositor) must not hang ``doctor``.
        problem = roundtrip(display, PROBE_TIMEOUT_S)
    finally:
        display.disconnect()
    if problem:
        log.info("the Wayland display gave no list of globals: %s", problem)
        return {}
    return found


PROBE_TIMEOUT_S = 2.0


def roundtrip(display: Display, timeout_s: float) -> str:
    """``wl_display.sync`` and wait for its ``done``, at most ``timeout_s``: '' once the
    compositor handled everything sent before, else what went wrong."""
    done: list[bool] = []
    callback = display.sync()
    callback.dispatcher["done"] = lambda _callback, _data: done.append(True)
    deadline = time.monotonic() + timeout_s
    fd = display.get_fd()
    try:
        while not done:
            display.flush()
            left = deadline - time.monotonic()
            if left <= 0:
                return "no answer"
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                display.read()
                display.dispatch(block=False)
    except RuntimeError as exc:
        return f"connection closed: {exc}"
    finally:
        callback._destroy()
    return ""


__all__ = [
    "ConnectionLost",
    "GlobalInfo",
    "WaylandConnection",
    "handler",
    "list_globals",
    "open_connection",
    "pywayland_missing",
]

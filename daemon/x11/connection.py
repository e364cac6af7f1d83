"""One X connection watched by the asyncio loop, and event dispatch to its users."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import defaultdict
from collections.abc import Callable
from types import TracebackType
from typing import Any

from anyfill.daemon.errors import DesktopUnavailable

log = logging.getLogger("anyfill.x11")

EventHandler = Callable[[Any], None]


class XConnection:
    """Opens the display, owns a hidden helper window and dispatches events by type.

    python-xlib is synchronous; its replies are read inline (sub-millisecond on a local
    server) and events are drained whenever the socket is readable and after every
    operation, so nothing waits in the library's queue unseen.
    """

    def __init__(self, display_name: str | None = None) -> None:
        self._display_name = display_name
        self._handlers: defaultdict[int, list[EventHandler]] = defaultdict(list)
        self._atoms: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pump_scheduled = False
        self._fd = -1
        self.display: Any = None
        self.root: Any = None
        self.window: Any = None
        """Our unmapped helper window: selection owner and property scratch space."""
        self.lost = asyncio.Event()
        """Set when the X connection broke (the server exited or closed us)."""

    async def __aenter__(self) -> XConnection:
        self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        name = self._display_name or os.environ.get("DISPLAY", "")
        if not name:
            wayland = (
                " (Wayland sessions need Xwayland and DISPLAY)"
                if os.environ.get("WAYLAND_DISPLAY")
                else ""
            )
            raise DesktopUnavailable(f"no X display: DISPLAY is not set{wayland}")
        from Xlib import X, display, error

        try:
            self.display = display.Display(name)
        except (error.DisplayError, OSError) as exc:
            raise DesktopUnavailable(f"cannot open the X display {name!r}: {exc}") from exc
        self.display.set_error_handler(self._on_x_error)
        self.root = self.display.screen().root
        self.window = self.root.create_window(
            -10, -10, 1, 1, 0, X.CopyFromParent, event_mask=X.PropertyChangeMask
        )
        self.window.set_wm_name("anyfill")
        self.display.flush()
        self._loop = asyncio.get_running_loop()
        self._fd = self.display.fileno()
        self._loop.add_reader(self._fd, self.pump)

    def close(self) -> None:
        if self.display is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(self._fd)
        try:
            self.window.destroy()
            self.display.close()
        except Exception as exc:  # noqa: BLE001 - the server may already be gone at exit
            log.debug("closing the X connection: %s", exc)
        self.display = None

    @staticmethod
    def _on_x_error(err: Any, request: Any) -> None:
        # Errors of requests without replies (a requestor window vanished, a grab refused)
        # arrive here asynchronously; the callers that care check state themselves.
        log.debug("X error: %s", err)

    def atom(self, name: str) -> int:
        if name not in self._atoms:
            value = int(self.display.intern_atom(name))
            self._atoms[name] = value
            self._names[value] = name
        return self._atoms[name]

    def atom_name(self, atom: int) -> str:
        if atom not in self._names:
            self._names[atom] = str(self.display.get_atom_name(atom))
        return self._names[atom]

    def on(self, event_type: int, handler: EventHandler) -> Callable[[], None]:
        """Call ``handler`` for each event of ``event_type``; returns an unsubscribe."""
        self._handlers[event_type].append(handler)
        return lambda: self._handlers[event_type].remove(handler)

    def flush(self) -> None:
        """Send queued requests and dispatch whatever events came back meanwhile."""
        self.display.flush()
        self.schedule_pump()

    def schedule_pump(self) -> None:
        if self._loop is not None and not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self.pump)

    def pump(self) -> None:
        """Dispatch every event the library has read or can read without blocking."""
        self._pump_scheduled = False
        if self.display is None:
            return
        try:
            while self.display.pending_events():
                event = self.display.next_event()
                for handler in list(self._handlers.get(event.type, ())):
                    try:
                        handler(event)
                    except Exception:  # one bad handler must not stop event delivery
                        log.exception("handling X event %s", event.type)
        except Exception as exc:  # noqa: BLE001 - the connection broke: stop watching it
            log.error("lost the X connection: %s", exc)
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            self.lost.set()

    async def server_time(self) -> int:
        """A current X server timestamp (ICCCM asks owners not to use CurrentTime)."""
        from Xlib import X, Xatom

        prop = self.atom("ANYFILL_TIMESTAMP")
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_property(event: Any) -> None:
            if event.window.id == self.window.id and event.atom == prop and not done.done():
                done.set_result(int(event.time))

        unsubscribe = self.on(X.PropertyNotify, on_property)
        try:
            self.window.change_property(prop, Xatom.INTEGER, 32, [0], X.PropModeAppend)
            self.flush()
            return await asyncio.wait_for(done, 1.0)
        except TimeoutError:
            return int(X.CurrentTime)
        finally:
            unsubscribe()

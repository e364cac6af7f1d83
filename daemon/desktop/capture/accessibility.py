"""Accessibility capture on Linux: AT-SPI's Text interface, no keys and no clipboard.

Optional: needs PyGObject with the Atspi typelib (``gir1.2-atspi-2.0``) and an
accessibility bus; detected at run time. Applications must expose their text (Qt with
``QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1``, GTK by default, Chromium with
``--force-renderer-accessibility``). A password field stops the capture chain.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.context import CaretRect
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.atspi_fields import window_text_fields
from anyfill.daemon.desktop.capture.base import Captured, trimmed
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.errors import CaptureError, SecureField
from anyfill.daemon.settings.live import Reader, reader

log = logging.getLogger("anyfill.capture.atspi")

TIMEOUT_S = 0.3
FIRST_TIMEOUT_S = 1.0
"""A process asked for the first time builds its accessibility tree (Qt does it lazily, and
a busy machine is slow): one longer wait, then the short one once it has answered."""
MAX_NODES = 400
"""AT-SPI calls are D-Bus round trips: a bounded walk keeps a huge tree from stalling."""
RETRY_ABSENT_S = 30.0
"""A process that exposed no text field is not asked again for this long (each miss
costs round trips on every press)."""


def load_atspi() -> tuple[Any, str]:
    """The Atspi module, or None and the reason it is missing."""
    try:
        import gi  # type: ignore[import-untyped, import-not-found, unused-ignore]

        gi.require_version("Atspi", "2.0")
        from gi.repository import Atspi  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except (ImportError, ValueError) as exc:
        return None, f"AT-SPI is not installed ({exc}); install PyGObject and gir1.2-atspi-2.0"
    return Atspi, ""


class AccessibilityCapture:
    name: CaptureStrategy = "accessibility"

    @property
    def _config(self) -> CaptureConfig:
        # Read at each use: the settings in force, while what was learned here stays.
        return self._read_config()

    def __init__(self, config: CaptureConfig | Reader[CaptureConfig]) -> None:
        self._read_config = reader(config)
        self._atspi, self.unavailable = load_atspi()
        # libatspi is not thread-safe: every call goes through this one thread.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="anyfill-atspi")
        self._absent: dict[int, float] = {}
        self._answered: set[int] = set()
        self._connected = False
        self._no_bus = ""
        self._bus_retry_at = 0.0

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        if self._atspi is None:
            raise CaptureError(self.unavailable)
        if target.pid is None:
            raise CaptureError("the window names no process")
        if self._absent.get(target.pid, 0.0) > time.monotonic():
            raise CaptureError("the application exposes no text over AT-SPI (checked recently)")
        loop = asyncio.get_running_loop()
        try:
            found = await asyncio.wait_for(
                loop.run_in_executor(self._thread, self._read, target.pid, app.read_fields),
                TIMEOUT_S if target.pid in self._answered else FIRST_TIMEOUT_S,
            )
        except TimeoutError as exc:
            self._absent[target.pid] = time.monotonic() + RETRY_ABSENT_S
            raise CaptureError("the application did not answer over AT-SPI") from exc
        except SecureField:
            raise
        except CaptureError:
            self._absent[target.pid] = time.monotonic() + RETRY_ABSENT_S
            raise
        self._absent.pop(target.pid, None)
        self._answered.add(target.pid)
        (prefix, suffix, caret), fields = found
        captured = trimmed(prefix, suffix, target, "accessibility", self._config, caret=caret)
        if fields:
            captured = replace(captured, context=replace(captured.context, fields=fields))
        return captured

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        """The text before the caret now, read the same way (no keys, no clipboard)."""
        if self._atspi is None or target.pid is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            (prefix, _, _), _ = await asyncio.wait_for(
                loop.run_in_executor(self._thread, self._read, target.pid), TIMEOUT_S
            )
        except (TimeoutError, CaptureError) as exc:
            log.info("reading the text back over AT-SPI failed: %s", exc or "no answer")
            return None
        return str(prefix)

    def _read(
        self, pid: int, fields: bool = False
    ) -> tuple[tuple[str, str, CaretRect | None], tuple[tuple[str, str], ...]]:
        """The text around the caret and, with ``fields``, the window's other text fields."""
        if not self._connected:
            # libatspi aborts the whole process (g_error) when it cannot reach the bus,
            # so the bus is checked the way libatspi finds it before its first call.
            if time.monotonic() < self._bus_retry_at:
                raise CaptureError(self._no_bus)
            problem = accessibility_bus_problem()
            if problem:
                self._no_bus = problem
                self._bus_retry_at = time.monotonic() + RETRY_ABSENT_S
                raise CaptureError(problem)
            self._connected = True
        atspi = self._atspi
        desktop = atspi.get_desktop(0)
        for index in range(desktop.get_child_count()):
            app = desktop.get_child_at_index(index)
            if app is not None and app.get_process_id() == pid:
                node = _focused(atspi, app)
                if node is not None:
                    around = _text_around_caret(atspi, node)
                    return around, window_text_fields(atspi, node) if fields else ()
        raise CaptureError("the application exposes no focused text field over AT-SPI")


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
    if not os.environ.get("DISPLAY"):
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


def _focused(atspi: Any, root: Any) -> Any:
    """Breadth-first search for the focused node, bounded so a huge tree cannot hang us."""
    queue, seen = [root], 0
    while queue and seen < MAX_NODES:
        node = queue.pop(0)
        seen += 1
        states = node.get_state_set()
        if states.contains(atspi.StateType.FOCUSED) and node.get_text_iface() is not None:
            return node
        queue.extend(
            child
            for child in (node.get_child_at_index(i) for i in range(node.get_child_count()))
            if child is not None
        )
    return None


def _text_around_caret(atspi: Any, node: Any) -> tuple[str, str, CaretRect | None]:
    if node.get_role() == atspi.Role.PASSWORD_TEXT:
        raise SecureField("the caret is in a password field")
    text = node.get_text_iface()
    count = text.get_character_count()
    caret = text.get_caret_offset()
    if caret < 0:
        raise CaptureError("the text field reports no caret")
    whole = text.get_text(0, count)
    rect = text.get_character_extents(caret, atspi.CoordType.SCREEN)
    box = CaretRect(rect.x, rect.y, max(rect.width, 1), rect.height) if rect.height > 0 else None
    return whole[:caret], whole[caret:], box

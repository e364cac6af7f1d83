"""The accessibility capture strategy: AT-SPI's Text interface, no keys and no clipboard.

Applications must expose their text (Qt with ``QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1``, GTK
by default, Chromium with ``--force-renderer-accessibility``). A password field stops
the capture chain.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.atspi.fields import window_text_fields
from anyfill.daemon.atspi.session import AtspiSession, NoAccessibility, shared_session
from anyfill.daemon.atspi.text import Field, caret_rect, read_field, toolkit_of
from anyfill.daemon.atspi.tree import focused_text
from anyfill.daemon.context import CaretRect
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured, trimmed
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.errors import CaptureError, SecureField
from anyfill.daemon.settings.live import Reader, reader

log = logging.getLogger("anyfill.capture.atspi")

TIMEOUT_S = 0.3
FIRST_TIMEOUT_S = 1.0
"""A process asked for the first time builds its accessibility tree (Qt does it lazily, and
a busy machine is slow): one longer wait, then the short one once it has answered."""
FIELDS_BUDGET_S = 0.15
"""Time the walk for the window's other text fields may take (a context source)."""
RETRY_ABSENT_S = 30.0
"""A process that exposed no text field is not asked again for this long (each miss
costs round trips on every press)."""


class AccessibilityCapture:
    name: CaptureStrategy = "accessibility"

    @property
    def _config(self) -> CaptureConfig:
        # Read at each use: the settings in force, while what was learned here stays.
        return self._read_config()

    def __init__(
        self, config: CaptureConfig | Reader[CaptureConfig], session: AtspiSession | None = None
    ) -> None:
        self._read_config = reader(config)
        self._session = session or shared_session()
        self.unavailable = self._session.unavailable
        # Per window, not per process: a new window of a running app builds its tree on
        # the first query too (Mousepad's second window did not answer within the short wait).
        self._absent: dict[tuple[int, int], float] = {}
        self._answered: set[tuple[int, int]] = set()
        self._kept: tuple[int, Any] = (0, None)
        """The last capture's number and its focused node, for the window's other fields:
        set and taken on the session's thread only (a libatspi object never leaves it)."""
        self._captures = 0

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        if target.pid is None:
            raise CaptureError("the window names no process")
        window = (target.pid, target.window_id)
        if self._absent.get(window, 0.0) > time.monotonic():
            raise CaptureError("the application exposes no text over AT-SPI (checked recently)")
        pid = target.pid
        self._captures += 1
        number = self._captures if app.read_fields else 0
        began = time.monotonic()
        try:
            field, box = await self._session.call(
                lambda atspi: self._read_keeping(atspi, pid, number),
                TIMEOUT_S if window in self._answered else FIRST_TIMEOUT_S,
            )
        except TimeoutError as exc:
            self._absent[window] = time.monotonic() + RETRY_ABSENT_S
            raise CaptureError("the application did not answer over AT-SPI") from exc
        except NoAccessibility as exc:
            raise CaptureError(str(exc)) from None
        except SecureField:
            raise
        except CaptureError:
            self._absent[window] = time.monotonic() + RETRY_ABSENT_S
            raise
        log.debug("read over AT-SPI in %.1f ms", (time.monotonic() - began) * 1000)
        self._absent.pop(window, None)
        self._answered.add(window)
        captured = trimmed(
            field.prefix, field.suffix, target, "accessibility", self._config, caret=box
        )
        fields = await self._other_fields(number, field.toolkit) if number else ()
        if fields:  # the context sources decide what of them is sent
            captured = replace(captured, context=replace(captured.context, fields=fields))
        return captured

    def _read_keeping(self, atspi: Any, pid: int, number: int) -> tuple[Field, CaretRect | None]:
        """:func:`_read`, on the session's thread; the node is kept there for capture
        ``number`` (0: not kept). A newer capture's read drops an older one's node."""
        self._kept = (0, None)
        field, box, node = _read(atspi, pid)
        if number:
            self._kept = (number, node)
        return field, box

    def _take_kept(self, number: int) -> Any:
        """Capture ``number``'s node, once (None when a newer capture replaced it)."""
        kept, node = self._kept
        if kept != number:
            return None
        self._kept = (0, None)
        return node

    async def _other_fields(self, number: int, toolkit: str) -> tuple[tuple[str, str], ...]:
        """The window's other text fields, in a call of their own after the capture: its
        walk stops at ``FIELDS_BUDGET_S`` on the session's thread, and a context source
        never fails (or slows past that) the press it serves."""

        def walk(atspi: Any) -> tuple[tuple[str, str], ...]:
            node = self._take_kept(number)
            if node is None:
                return ()
            return window_text_fields(atspi, node, toolkit, budget_s=FIELDS_BUDGET_S)

        try:
            return await self._session.call(walk, FIELDS_BUDGET_S + TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a dead node raises GLib errors of any kind
            log.info("the window's other fields were not read: %s", type(exc).__name__)
            return ()

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        """The text before the caret now, read the same way (no keys, no clipboard)."""
        around = await self.read_back_around(target, app)
        return None if around is None else around[0]

    async def read_back_around(self, target: Target, app: AppSettings) -> tuple[str, str] | None:
        """The text before and after the caret now."""
        if target.pid is None:
            return None
        pid = target.pid
        try:
            # The longer wait: the application is busy with the text just inserted, and a
            # read that gives up reports "sent ... could not be read back" for text that
            # landed.
            field = await self._session.call(lambda atspi: _read(atspi, pid)[0], FIRST_TIMEOUT_S)
        except (TimeoutError, CaptureError, NoAccessibility) as exc:
            log.info("reading the text back over AT-SPI failed: %s", exc or "no answer")
            return None
        return field.prefix, field.suffix


def _read(atspi: Any, pid: int) -> tuple[Field, CaretRect | None, Any]:
    """The focused field, its caret box and its node."""
    found = focused_text(atspi, pid)
    if found is None:
        raise CaptureError("the application exposes no focused text field over AT-SPI")
    node, app = found
    if node.get_role() == atspi.Role.PASSWORD_TEXT:
        raise SecureField("the caret is in a password field")
    field = read_field(atspi, node, toolkit_of(app))
    if field.caret < 0:
        raise CaptureError("the text field reports no caret")
    return field, caret_rect(atspi, node, field), node

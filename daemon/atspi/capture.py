"""The accessibility capture strategy: AT-SPI's Text interface, no keys and no clipboard.

Applications must expose their text (Qt with ``QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1``, GTK
by default, Chromium with ``--force-renderer-accessibility``). A password field stops
the capture chain.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from anyfill.config.model import CaptureConfig, CaptureStrategy
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
        self._absent: dict[int, float] = {}
        self._answered: set[int] = set()

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        if target.pid is None:
            raise CaptureError("the window names no process")
        if self._absent.get(target.pid, 0.0) > time.monotonic():
            raise CaptureError("the application exposes no text over AT-SPI (checked recently)")
        pid = target.pid
        try:
            field, box = await self._session.call(
                lambda atspi: _read(atspi, pid),
                TIMEOUT_S if pid in self._answered else FIRST_TIMEOUT_S,
            )
        except TimeoutError as exc:
            self._absent[pid] = time.monotonic() + RETRY_ABSENT_S
            raise CaptureError("the application did not answer over AT-SPI") from exc
        except NoAccessibility as exc:
            raise CaptureError(str(exc)) from None
        except SecureField:
            raise
        except CaptureError:
            self._absent[pid] = time.monotonic() + RETRY_ABSENT_S
            raise
        self._absent.pop(pid, None)
        self._answered.add(pid)
        return trimmed(field.prefix, field.suffix, target, "accessibility", self._config, caret=box)

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
            field, _ = await self._session.call(lambda atspi: _read(atspi, pid), TIMEOUT_S)
        except (TimeoutError, CaptureError, NoAccessibility) as exc:
            log.info("reading the text back over AT-SPI failed: %s", exc or "no answer")
            return None
        return field.prefix, field.suffix


def _read(atspi: Any, pid: int) -> tuple[Field, CaretRect | None]:
    found = focused_text(atspi, pid)
    if found is None:
        raise CaptureError("the application exposes no focused text field over AT-SPI")
    node, app = found
    if node.get_role() == atspi.Role.PASSWORD_TEXT:
        raise SecureField("the caret is in a password field")
    field = read_field(atspi, node, toolkit_of(app))
    if field.caret < 0:
        raise CaptureError("the text field reports no caret")
    return field, caret_rect(atspi, node, field)

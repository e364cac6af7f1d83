"""Insertion at the caret through AT-SPI EditableText, checked against the whole document.

AT-SPI does not depend on the display protocol: it reaches native Wayland GTK, Qt and
(with accessibility on) Chromium windows. After the call the document must be exactly
the text before the caret, the completion, the text after it: nothing missing on either
side, no NUL or stray text. Anything else is a failure, and text the application added
that we did not ask for is taken out again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from anyfill.daemon.atspi.session import AtspiSession, NoAccessibility, shared_session
from anyfill.daemon.atspi.text import Field, insert_length, read_field, toolkit_of
from anyfill.daemon.atspi.tree import focused_text
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.errors import InsertError, SecureField

log = logging.getLogger("anyfill.atspi.insert")

TIMEOUT_S = 1.5
"""Generous: an insertion that times out leaves it unknown whether the text landed."""
RETRY_ABSENT_S = 30.0
"""A process that showed no accessible text field is pasted into for this long."""
RETRY_S = 300.0
"""An application whose text field refused EditableText is pasted into for this long
before AT-SPI is tried again (the choice is cached per application)."""
NOT_AS_ASKED = (
    "the application changed the text, but not as asked; "
    "check the document (the completion was kept)"
)

Landed = Literal["inserted", "absent", "refused"]


class AtspiInserter:
    """The :class:`~anyfill.daemon.desktop.ports.DirectInsert` port through AT-SPI EditableText."""

    name = "accessibility"

    def __init__(self, session: AtspiSession | None = None) -> None:
        self._session = session or shared_session()
        self.unavailable = self._session.unavailable
        self._refused: dict[str, float] = {}
        self._absent: dict[int, float] = {}
        """Processes that showed no accessible text field, by pid: a process restarted with
        accessibility on is a new pid, asked at once."""

    async def insert(self, text: str, target: Target, guard: Callable[[], None]) -> bool:
        if target.pid is None:
            return False
        app = target.app or target.process or str(target.pid)
        if self._refused.get(app, 0.0) > time.monotonic():
            log.debug("%s refused EditableText recently; pasting", app)
            return False
        if self._absent.get(target.pid, 0.0) > time.monotonic():
            log.debug("%s showed no accessible text field recently; pasting", app)
            return False
        guard()
        pid = target.pid
        try:
            landed = await self._session.call(lambda atspi: _insert(atspi, pid, text), TIMEOUT_S)
        except NoAccessibility as exc:
            log.info("no AT-SPI insertion: %s", exc)
            return False
        except TimeoutError:
            # The call may still land later: pasting now could insert twice.
            raise InsertError(
                "the application did not answer the AT-SPI insertion in time; "
                "check the document (the completion was kept)"
            ) from None
        if landed == "absent":
            # No accessible text field (accessibility off in that process): that process
            # only is skipped for a while; restarted with accessibility on, it is asked.
            log.info("AT-SPI insertion not possible in %s (absent); falling back", app)
            self._absent[pid] = time.monotonic() + RETRY_ABSENT_S
            return False
        if landed != "inserted":
            log.info("AT-SPI insertion not possible in %s (%s); falling back", app, landed)
            self._refused[app] = time.monotonic() + RETRY_S
            return False
        self._refused.pop(app, None)
        return True


def _insert(atspi: Any, pid: int, text: str) -> Landed:
    found = focused_text(atspi, pid)
    if found is None:
        return "absent"
    node, app = found
    return insert_into(atspi, node, toolkit_of(app), text)


def insert_into(atspi: Any, node: Any, toolkit: str, text: str) -> Landed:
    """Insert ``text`` at the caret of the text field ``node`` of a ``toolkit`` app."""
    if node.get_role() == atspi.Role.PASSWORD_TEXT:
        raise SecureField("the caret is in a password field")
    if "EditableText" not in node.get_interfaces():
        return "refused"
    before = read_field(atspi, node, toolkit)
    if before.caret < 0:
        return "refused"
    atspi.EditableText.insert_text(
        node, before.offset(before.caret), text, insert_length(text, toolkit)
    )
    after = read_field(atspi, node, toolkit)
    if after.text == before.text:
        return "refused"  # read-only, or the call is not implemented
    wanted = before.prefix + text + before.suffix
    if after.text != wanted:
        _take_out_stray(atspi, node, before, after, text)
        raise InsertError(NOT_AS_ASKED)
    end = Field(wanted, before.caret + len(text), after.unit, toolkit)
    if after.caret != end.caret:
        atspi.Text.set_caret_offset(node, end.offset(end.caret))
    return "inserted"


def _take_out_stray(atspi: Any, node: Any, before: Field, after: Field, text: str) -> None:
    """Put the document back as it was when it still starts with what preceded the caret
    and grew (a toolkit that wrote more than the completion, e.g. NULs: the text read
    back ends at the first NUL, the character count does not)."""
    grown = after.count - before.count
    if not after.text.startswith(before.prefix) or grown <= 0:
        log.warning("the AT-SPI insertion changed the document around the caret")
        return
    log.warning(
        "the AT-SPI insertion added %d units for %d characters; taking them out", grown, len(text)
    )
    start = before.offset(before.caret)
    atspi.EditableText.delete_text(node, start, start + grown)
    if read_field(atspi, node, before.toolkit).text != before.text:
        log.warning("what the insertion added could not be taken out: check the document")

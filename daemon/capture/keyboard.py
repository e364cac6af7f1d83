"""Keyboard capture: select to the document (or line) edge, copy, collapse the selection back.

Before each copy we own CLIPBOARD and PRIMARY with a sentinel. Any selection makes the
application take PRIMARY, and the copy makes it take CLIPBOARD, so losing either within
``empty_timeout_ms`` means there was text; losing neither means the caret sits at that
edge, and then the collapse key is not pressed (it would move the caret). The user's
clipboard and PRIMARY are saved first and put back afterwards.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.apprules import AppSettings
from anyfill.daemon.capture.base import Captured, trimmed
from anyfill.daemon.desktop import ClipSnapshot, Desktop, Offer, Target
from anyfill.daemon.errors import CaptureError
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.capture.keyboard")

SELECT = {
    "document": ("<ctrl>+<shift>+<home>", "<ctrl>+<shift>+<end>"),
    "line": ("<shift>+<home>", "<shift>+<end>"),
}
# Right collapses a selection to its end, Left to its start, in every toolkit we test.
COLLAPSE_PREFIX = "<right>"
COLLAPSE_SUFFIX = "<left>"
MIN_EMPTY_S = 0.02
"""Floor for the adaptive "nothing selected" wait on the second side."""


class KeyboardCapture:
    name: CaptureStrategy = "keyboard"

    def __init__(self, desktop: Desktop, config: CaptureConfig) -> None:
        self._desktop = desktop
        self._config = config

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        clipboard = self._desktop.clipboard
        saved_clipboard = await clipboard.snapshot("clipboard")
        saved_primary = await clipboard.snapshot("primary")
        select_prefix, select_suffix = SELECT[self._config.scope]
        configured = self._config.empty_timeout_ms / 1000
        suffix_side: _Side | None = None
        try:
            prefix_side = await self._copy_side(
                select_prefix, COLLAPSE_PREFIX, app.copy_keys, configured
            )
            # The app just showed how fast it reacts to a selection: "nothing selected"
            # on the other side is decided after a few times that, not the full timeout.
            answered = prefix_side.answered_s
            quick = configured if answered is None else max(MIN_EMPTY_S, answered * 6)
            suffix_side = await self._copy_side(
                select_suffix, COLLAPSE_SUFFIX, app.copy_keys, min(configured, quick)
            )
        finally:
            await clipboard.restore("clipboard", saved_clipboard)
            # After "nothing selected" on the last side, PRIMARY goes back as of our
            # sentinel: should the app still select late, its claim is newer and wins,
            # so the selection guard sees it and nothing is pasted over that text.
            late_guard = suffix_side.primary if suffix_side and suffix_side.empty else None
            await clipboard.restore("primary", saved_primary, as_of=late_guard)
        return trimmed(prefix_side.text, suffix_side.text, target, "keyboard", self._config)

    async def _copy_side(
        self, select: str, collapse: str, copy: str, empty_timeout_s: float
    ) -> _Side:
        keys, clipboard = self._desktop.keys, self._desktop.clipboard
        sentinel = ClipSnapshot.from_text(f"anyfill-sentinel-{uuid.uuid4().hex}")
        clip_offer = await clipboard.offer("clipboard", sentinel)
        primary_offer = await clipboard.offer("primary", sentinel)
        started = time.monotonic()
        await keys.press(select)
        await keys.press(copy)
        selected = await first_set(clip_offer.lost, primary_offer.lost, timeout_s=empty_timeout_s)
        if not selected:
            return _Side("", None, primary_offer)  # nothing to select: caret at this edge
        answered = time.monotonic() - started
        timeout = self._config.copy_timeout_ms / 1000
        copied = await first_set(clip_offer.lost, timeout_s=timeout)
        text = await clipboard.read_text("clipboard", timeout)
        await keys.press(collapse)
        # A round trip to the app (it owns the clipboard now): it answers after handling
        # the collapse key, so its reaction to losing the selection (GTK gives PRIMARY
        # up) is over before we restore the user's PRIMARY.
        await clipboard.read_text("clipboard", timeout)
        if not copied or text is None:
            raise CaptureError(f"the application did not copy the selection with {copy}")
        return _Side(text, answered, primary_offer)


@dataclass(frozen=True)
class _Side:
    text: str
    answered_s: float | None
    """How fast the app showed a selection; None when there was nothing to select."""
    primary: Offer
    """Our sentinel ownership of PRIMARY while this side was copied."""

    @property
    def empty(self) -> bool:
        return self.answered_s is None

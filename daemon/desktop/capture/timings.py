"""What each application took before, so that the waits fit the app and its current load.

A wait that is too short for a slow app takes one side of the caret as empty, or
restores the user's clipboard before the app read the paste; a wait that is long for
every app slows every press down. So anyfill learns, per application (window class),
from the presses it already saw: how long the app took to show a selection after our
select keys, and how long its paste reads went on. Late answers (after anyfill stopped
waiting) are learned too, so the next wait covers them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

KEEP = 20
"""Presses remembered per app: enough to cover a burst of load, short enough to adapt."""


@dataclass
class _App:
    reactions: deque[float] = field(default_factory=lambda: deque(maxlen=KEEP))
    """Seconds from our select+copy keys to the app's first claim of a selection."""
    paste_fetches: deque[int] = field(default_factory=lambda: deque(maxlen=KEEP))
    """Data reads of one paste (Chromium: two; it inserts the second)."""
    paste_spans: deque[float] = field(default_factory=lambda: deque(maxlen=KEEP))
    """Seconds from the paste keys to the app's last request about the paste."""


class AppTimings:
    """Per-app history of reaction times; every wait is derived from the slowest seen."""

    def __init__(self) -> None:
        self._apps: dict[str, _App] = {}

    def _app(self, app: str) -> _App:
        return self._apps.setdefault(app, _App())

    # -- capture ---------------------------------------------------------------------

    def note_reaction(self, app: str, seconds: float) -> None:
        self._app(app).reactions.append(seconds)

    def slowest_reaction(self, app: str) -> float | None:
        reactions = self._apps.get(app)
        return max(reactions.reactions) if reactions and reactions.reactions else None

    def empty_wait(self, app: str, configured_s: float, cap_s: float) -> float:
        """How long to wait for a selection before deciding there is nothing to select:
        three times the slowest reaction this app showed lately, never below the
        configured ``capture.empty_timeout_ms``, never above ``cap_s``."""
        slowest = self.slowest_reaction(app)
        wanted = configured_s if slowest is None else max(configured_s, 3 * slowest)
        return min(wanted, cap_s)

    def settle(self, app: str, floor_s: float, cap_s: float, factor: float = 4.0) -> float:
        """How long a late claim caused by our keys may still come after the capture:
        ``factor`` times the slowest reaction seen, within ``floor_s`` and ``cap_s``."""
        slowest = self.slowest_reaction(app)
        wanted = floor_s if slowest is None else max(floor_s, factor * slowest)
        return min(wanted, cap_s)

    # -- paste -----------------------------------------------------------------------

    def note_paste(self, app: str, fetches: int, span_s: float) -> None:
        record = self._app(app)
        record.paste_fetches.append(fetches)
        record.paste_spans.append(span_s)

    def paste_fetches(self, app: str) -> int:
        """The most data reads one paste took in this app lately (1 when unknown)."""
        record = self._apps.get(app)
        return max(record.paste_fetches) if record and record.paste_fetches else 1

    def paste_span(self, app: str) -> float | None:
        record = self._apps.get(app)
        return max(record.paste_spans) if record and record.paste_spans else None

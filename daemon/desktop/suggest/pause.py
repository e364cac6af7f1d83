"""How long the user must pause before a suggestion is asked for: adaptive, in the spirit
of Tabby's debounce. The pause must clearly exceed the user's own gaps between keys (or
every gap of a burst would ask), and a slow backend makes a wasted request dearer, so its
recent latency lengthens the pause a little. A local model gets a shorter floor than a
cloud one. Everything is clamped to ``PAUSE_MIN_MS``-``PAUSE_MAX_MS``.
"""

from __future__ import annotations

import statistics
from collections import deque

from anyfill.config.model import PAUSE_MAX_MS, PAUSE_MIN_MS

RHYTHM_FACTOR = 2.0
"""The pause is this many times the user's typical gap between two keys."""
LATENCY_SHARE = 0.25
"""This share of the backend's recent typical latency is added to the pause."""
FLOOR_MS = {True: 150.0, False: 300.0}
"""The shortest adaptive pause, local backend (True) or not."""
START_MS = {True: 300.0, False: 450.0}
"""The pause before enough keystrokes were seen to know the user's rhythm."""
MIN_INTERVALS = 4
GAP_S = 1.5
"""A longer gap between two keys is a pause, not the rhythm of typing."""


class AdaptivePause:
    """Learns the keystroke rhythm and the backend latency; :meth:`ms` is the pause now."""

    def __init__(self, fixed_ms: int = 0) -> None:
        self.fixed_ms = fixed_ms
        self._intervals: deque[float] = deque(maxlen=24)
        self._latencies: deque[float] = deque(maxlen=12)
        self._last: float | None = None

    def keystroke(self, now: float) -> None:
        if self._last is not None and 0 < now - self._last < GAP_S:
            self._intervals.append(now - self._last)
        self._last = now

    def latency(self, ms: float) -> None:
        """The time a suggestion's backend took (asked to answered)."""
        self._latencies.append(ms)

    def ms(self, local: bool) -> float:
        if self.fixed_ms:
            return float(self.fixed_ms)
        if len(self._intervals) >= MIN_INTERVALS:
            rhythm = RHYTHM_FACTOR * statistics.median(self._intervals) * 1000
        else:
            rhythm = START_MS[local]
        latency = statistics.median(self._latencies) if self._latencies else 0.0
        pause = max(rhythm, FLOOR_MS[local]) + LATENCY_SHARE * latency
        return min(max(pause, PAUSE_MIN_MS), PAUSE_MAX_MS)

"""When to ask for a suggestion: after the user pauses, never in the middle of a burst.

Pure logic on an injected clock (:class:`~anyfill.daemon.scheduler.clock.Clock`): the
accessibility listener reports edits and caret moves of the focused field, the trigger
re-arms one timer per edit and calls ``ask`` when it fires. An edit while a request is in
flight calls ``cancel`` first: the driver cancels it through the pipeline's latest-wins
path. Type-through: typing the first characters of the suggestion on screen gives the rest
back at once, with no timer and no request.
"""

from __future__ import annotations

from collections.abc import Callable

from anyfill.daemon.desktop.suggest.pause import AdaptivePause
from anyfill.daemon.desktop.suggest.typethrough import Shown, TypeThrough
from anyfill.daemon.scheduler.clock import Clock, TimerHandle


class SuggestTrigger:
    def __init__(
        self,
        clock: Clock,
        pause: AdaptivePause,
        ask: Callable[[], None],
        cancel: Callable[[], None],
        local: Callable[[], bool] = lambda: True,
    ) -> None:
        self._clock = clock
        self.pause = pause
        self._ask = ask
        self._cancel = cancel
        self._local = local
        self._timer: TimerHandle | None = None
        self._expected_caret: int | None = None
        self.busy = False
        """A request is in flight (asked, not yet :meth:`finished`)."""
        self.typethrough = TypeThrough()
        self.requests = 0
        self.cancels = 0
        self.asked_at: float | None = None

    @property
    def armed(self) -> bool:
        return self._timer is not None

    # -- what the user did ----------------------------------------------------------

    def inserted(self, offset: int, text: str) -> Shown | None:
        """Text typed (or pasted) at ``offset``; the rest of the shown suggestion when the
        user typed its beginning (show it, nothing is asked), else None."""
        self._expected_caret = offset + len(text)
        if self.typethrough.completes(offset, text):
            # The suggestion went in whole, as an accepted one does: no keystroke of the
            # user's rhythm and nothing asked, whether or not the app's event for our
            # paste came while the keys were still being sent (under load it comes later).
            self._disarm()
            return None
        self._keystroke()
        rest = self.typethrough.typed(offset, text)
        if rest is not None:
            self._disarm()
            return rest
        self._rearm()
        return None

    def deleted(self, offset: int) -> None:
        self._expected_caret = offset
        self.typethrough.clear()
        self._keystroke()
        self._rearm()

    def caret_moved(self, offset: int) -> None:
        if offset == self._expected_caret:
            return  # the caret following the edit just reported
        self._expected_caret = None
        self._interrupt()
        self._rearm()

    def left(self) -> None:
        """The focus went elsewhere, or suggestions were turned off: nothing more is asked."""
        self._disarm()
        self._interrupt()
        self.typethrough.clear()
        self._expected_caret = None

    # -- what the driver reports ----------------------------------------------------

    def shown(self, offset: int, middle: str) -> None:
        self.typethrough.show(offset, middle)

    def finished(self, latency_ms: float | None = None) -> None:
        """The request ended (shown, empty, refused or failed); its backend's latency."""
        self.busy = False
        if latency_ms is not None:
            self.pause.latency(latency_ms)

    # -- the timer ------------------------------------------------------------------

    def _keystroke(self) -> None:
        self.pause.keystroke(self._clock.now())
        self._interrupt()

    def _interrupt(self) -> None:
        if self.busy:
            self.busy = False
            self.cancels += 1
            self._cancel()

    def _rearm(self) -> None:
        self._disarm()
        due = self._clock.now() + self.pause.ms(self._local()) / 1000
        self._timer = self._clock.call_at(due, self._fire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self.busy = True
        self.requests += 1
        self.asked_at = self._clock.now()
        self._ask()

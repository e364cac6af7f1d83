"""One DEBUG line per finished attempt, from the scheduler's events on the bus.

Outcome, timings and token counts only; the reason (an error message, which can quote what
a server said about the prompt) goes through ``Private`` like any other text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from anyfill.daemon.bus import EventBus
from anyfill.daemon.log import Private
from anyfill.daemon.scheduler.events import AttemptFinished

__all__ = ["log_attempts", "summary"]

log = logging.getLogger("anyfill.daemon.scheduler.attempts")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}ms"


def summary(event: AttemptFinished) -> str:
    """The attempt in one line, without its reason."""
    parts = [
        f"request {event.request_id}",
        f"backend {event.backend}",
        event.outcome,
        f"queue {_ms(event.queue_wait_ms)}",
        f"first {_ms(event.first_token_ms)}",
        f"total {_ms(event.total_ms)}",
        f"tokens {event.prompt_tokens}+{event.completion_tokens}",
    ]
    if event.cost:
        parts.append(f"cost {event.cost:.6f}")
    if event.batched:
        parts.append(f"batch of {event.batched}")
    return ", ".join(parts)


def log_attempts(bus: EventBus) -> Callable[[], None]:
    """Log every ``AttemptFinished`` published on ``bus`` at DEBUG; returns the unsubscribe."""

    def on_attempt(event: AttemptFinished) -> None:
        if not log.isEnabledFor(logging.DEBUG):
            return
        if event.reason:
            log.debug("%s: %s", summary(event), Private(event.reason))
        else:
            log.debug("%s", summary(event))

    return bus.listen(on_attempt, AttemptFinished)

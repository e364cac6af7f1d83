"""One rate limit for a whole pool: each worker enforces its share.

Workers announce themselves on a retained presence topic whose Last Will clears it, so
every worker knows how many are online. With ``n`` online, each enforces 1/n of its
backends' per-minute limits. A smaller share applies at once; a larger one (a worker
left) only after one limit window, because the window of the worker that left still
holds what it sent, and the pool as a whole must never exceed the limit in any window.
For the same reason a worker joining a pool that has limits starts taking requests one
window after it announced itself (``join_delay``): the others shrink at once, and the
budget they used in the old window has expired by the time the newcomer sends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from anyfill.daemon.scheduler.clock import Clock, TimerHandle

log = logging.getLogger("anyfill.worker")

_NAMED = 8
"""Members named in the log line when the share changes (the rest are counted)."""


class PoolShare:
    def __init__(
        self,
        me: str,
        apply: Callable[[int], None],
        *,
        window_s: float,
        limited: bool,
        clock: Clock,
    ) -> None:
        self.me = me
        self._apply = apply
        self.window_s = window_s
        self.limited = limited
        """Whether any backend has a per-minute limit (otherwise shares change nothing)."""
        self.members: set[str] = {me}
        self.enforced = 1
        self._clock = clock
        self._grow: TimerHandle | None = None
        apply(1)

    def join_delay(self, others_seen: bool) -> float:
        """How long to wait before taking requests."""
        return self.window_s if self.limited and others_seen else 0.0

    def online(self, worker: str) -> None:
        self.members.add(worker)
        self._update()

    def offline(self, worker: str) -> None:
        if worker != self.me:
            self.members.discard(worker)
            self._update()

    def _update(self) -> None:
        count = len(self.members)
        if count >= self.enforced:
            if self._grow is not None:
                self._grow.cancel()
                self._grow = None
            if count != self.enforced:
                self._set(count)
            return
        if self._grow is None:  # fewer workers: a bigger share, but only after a window
            self._grow = self._clock.call_at(self._clock.now() + self.window_s, self._grow_now)

    def _grow_now(self) -> None:
        self._grow = None
        count = len(self.members)
        if count != self.enforced:
            self._set(count)

    def _set(self, count: int) -> None:
        names = sorted(self.members)
        shown = ", ".join(name[:64] for name in names[:_NAMED])
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        log.info("pool share: 1/%d of each limit (%s%s)", count, shown, more)
        self.enforced = count
        self._apply(count)

    def close(self) -> None:
        if self._grow is not None:
            self._grow.cancel()
            self._grow = None


__all__ = ["PoolShare"]

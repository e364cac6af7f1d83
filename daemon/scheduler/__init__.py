"""anyfill.daemon.scheduler: the request queue every completion passes through.

``Scheduler`` and ``build_scheduler`` load the scheduler on first use: the tray and the
daemon's start read the small ``scheduler.events`` module long before a backend is built
(after ready), and importing the package must not load the whole queue for that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyfill.config.model import Settings
    from anyfill.daemon.backends.base import Backend
    from anyfill.daemon.bus import EventBus
    from anyfill.daemon.errors import AnyfillError
    from anyfill.daemon.scheduler.cache import CompletionCache
    from anyfill.daemon.scheduler.scheduler import Scheduler

__all__ = ["Scheduler", "build_scheduler"]


def __getattr__(name: str) -> Any:
    if name == "Scheduler":
        from anyfill.daemon.scheduler.scheduler import Scheduler

        return Scheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_scheduler(
    backends: Mapping[str, Backend],
    settings: Settings,
    *,
    unusable: Mapping[str, AnyfillError] | None = None,
    bus: EventBus | None = None,
    cache: CompletionCache | None = None,
) -> Scheduler:
    """The daemon's scheduler over the built backends, routed as the settings say
    (``cache``: another completion cache, e.g. ``CompletionCache(0)`` for none)."""
    from anyfill.daemon.scheduler.scheduler import Scheduler

    return Scheduler(
        list(backends.values()), settings.routing, bus=bus, unusable=unusable, cache=cache
    )

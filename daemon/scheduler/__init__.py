"""anyfill.daemon.scheduler: the request queue every completion passes through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from anyfill.daemon.scheduler.scheduler import Scheduler

if TYPE_CHECKING:
    from anyfill.config.model import Settings
    from anyfill.daemon.backends.base import Backend
    from anyfill.daemon.bus import EventBus
    from anyfill.daemon.errors import AnyfillError

__all__ = ["Scheduler", "build_scheduler"]


def build_scheduler(
    backends: Mapping[str, Backend],
    settings: Settings,
    *,
    unusable: Mapping[str, AnyfillError] | None = None,
    bus: EventBus | None = None,
) -> Scheduler:
    """The daemon's scheduler over the built backends, routed as the settings say."""
    return Scheduler(list(backends.values()), settings.routing, bus=bus, unusable=unusable)

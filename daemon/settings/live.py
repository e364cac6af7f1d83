"""The settings in force, held in one place that every part of the running daemon reads.

Parts keep a *reader* (``live.section("capture")``, ``live.get``) instead of a copy, so a
reload reaches every one of them with one assignment and nothing keeps a start-up value
by mistake. Only real work happens on a change (a new engine, rebound hotkeys, the log set
up again, the MQTT link restarted): who does it subscribes to the sections it cares about.
Objects that learn while they run (per-app capture timings, the AT-SPI caches) are built
once with readers and survive every reload.

Everything here runs on the core's event loop thread; there is no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from anyfill.config.model import Settings

log = logging.getLogger("anyfill.settings")

T = TypeVar("T")
Reader = Callable[[], T]
"""Returns the value in force now; call it each time the value is needed."""

Listener = Callable[[Settings, Settings, frozenset[str]], None]
"""Called with (old, new, the names of the sections that differ) after a change."""

SECTIONS: tuple[str, ...] = tuple(Settings.model_fields)


def reader(value: T | Reader[T]) -> Reader[T]:
    """A reader for ``value``: itself when it is one, else one that always returns ``value``
    (a part built with a fixed section, as tests and the CLI do)."""
    if callable(value):
        return value
    return lambda: value


def changed_sections(old: Settings, new: Settings) -> frozenset[str]:
    """The top-level tables of the file whose values differ between ``old`` and ``new``."""
    return frozenset(name for name in SECTIONS if getattr(old, name) != getattr(new, name))


class LiveSettings:
    def __init__(self, settings: Settings) -> None:
        self._current = settings
        self._listeners: list[tuple[frozenset[str] | None, Listener]] = []

    @property
    def current(self) -> Settings:
        return self._current

    def get(self) -> Settings:
        """The settings in force (a :data:`Reader` of the whole file)."""
        return self._current

    def section(self, name: str) -> Reader[Any]:
        """A reader of one table, e.g. ``live.section("capture")``."""
        if name not in SECTIONS:
            raise KeyError(f"no settings section {name!r}")
        return lambda: getattr(self._current, name)

    def subscribe(self, listener: Listener, sections: Iterable[str] | None = None) -> None:
        """Call ``listener`` after each change that touches one of ``sections`` (any, if
        None). Listeners run in the order they subscribed."""
        wanted = None if sections is None else frozenset(sections)
        unknown = (wanted or frozenset()) - set(SECTIONS)
        if unknown:
            raise KeyError(f"no settings section {', '.join(sorted(unknown))}")
        self._listeners.append((wanted, listener))

    def replace(self, new: Settings) -> frozenset[str]:
        """Put ``new`` in force for every reader at once; tell the listeners what changed."""
        old, self._current = self._current, new
        changed = changed_sections(old, new)
        for wanted, listener in list(self._listeners):
            if changed and (wanted is None or wanted & changed):
                try:
                    listener(old, new, changed)
                except Exception:  # one listener's bug must not keep the others stale
                    log.exception("a settings listener failed")
        return changed

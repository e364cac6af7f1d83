"""What backends run themselves, kept across engine rebuilds.

A settings change builds a new engine (new backends) and closes the old one once its last
request ends. A managed llama-server whose own settings did not change must not be stopped
and loaded again for that (seconds of model loading, the answers of a warm cache lost):
the new backend leases the server the old one runs, and the server stops when the last
backend holding it is closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Leases"]


@dataclass
class _Kept:
    thing: Any
    close: Callable[[Any], Awaitable[None]]
    holders: int = 0


class Leases:
    """Things shared by key between the backends of successive engines, counted."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, _Kept] = {}

    def lease(
        self, key: Hashable, make: Callable[[], T], close: Callable[[T], Awaitable[None]]
    ) -> T:
        """The thing kept under ``key``, made by ``make`` if none is (``close`` ends it when
        its last holder releases it)."""
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = _Kept(make(), close)
        kept.holders += 1
        thing: T = kept.thing
        return thing

    async def release(self, key: Hashable) -> None:
        kept = self._kept.get(key)
        if kept is None:
            return
        kept.holders -= 1
        if kept.holders <= 0:
            del self._kept[key]
            await kept.close(kept.thing)

    def __len__(self) -> int:
        return len(self._kept)

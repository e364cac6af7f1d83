"""Start-up objects leave the collector's sight; later garbage is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from anyfill.daemon.heap import freeze_startup_objects


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector can free it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_freezes_what_exists_and_still_collects_later_cycles(unfrozen: None) -> None:
    kept = Node()
    before = gc.get_freeze_count()
    freeze_startup_objects()
    assert gc.get_freeze_count() > before
    assert not any(obj is kept for obj in gc.get_objects())  # frozen: no longer walked

    later = Node()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None

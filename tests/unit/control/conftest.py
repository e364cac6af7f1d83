"""Short private runtime directories: a Unix socket path must fit in 107 bytes, and pytest's
own tmp_path can be longer than that."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh 0700 XDG_RUNTIME_DIR for this test."""
    path = Path(tempfile.mkdtemp(prefix="afc-"))
    path.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)

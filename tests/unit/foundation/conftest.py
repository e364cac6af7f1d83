from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def file_keyring(tmp_path: Path) -> Iterator[object]:
    """A real keyring backend (keyrings.alt's plaintext file) in a temporary directory."""
    import keyring
    from keyrings.alt.file import PlaintextKeyring

    class TempFileKeyring(PlaintextKeyring):  # type: ignore[misc]
        @property
        def file_path(self) -> str:
            return str(tmp_path / "keyring_pass.cfg")

    previous = keyring.get_keyring()
    backend = TempFileKeyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)

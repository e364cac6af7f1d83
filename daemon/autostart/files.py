"""Write start-up files without ever replacing one the user changed, unasked.

A manifest (``autostart.json`` in anyfill's data directory) keeps the SHA-256 of every file
anyfill wrote. A file on disk is then one of:

- ``absent``;
- ``current``: exactly what anyfill would write now;
- ``outdated``: anyfill wrote it and nobody touched it since (an older command, say): safe
  to replace;
- ``edited``: anyfill wrote it and it changed since, so the user (or their desktop's
  settings) edited it;
- ``foreign``: anyfill has no record of it (the user's own, or the manifest is gone).

Only ``absent`` and ``outdated`` files are written or removed without ``force``; with
``force`` the old file is kept beside the new one as ``<name>.anyfill-backup``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from anyfill.daemon.errors import AutostartError

State = Literal["absent", "current", "outdated", "edited", "foreign"]
BACKUP_SUFFIX = ".anyfill-backup"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Manifest:
    """Which files anyfill wrote, and their content's hash when it wrote them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._hashes = self._load()

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # A damaged manifest only makes anyfill more careful: every file looks foreign.
            return {}
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, dict):
            return {}
        return {str(k): str(v) for k, v in files.items()}

    def recorded(self, path: Path) -> str | None:
        return self._hashes.get(str(path))

    def record(self, path: Path, data: bytes) -> None:
        self._hashes[str(path)] = digest(data)
        self._save()

    def forget(self, path: Path) -> None:
        if self._hashes.pop(str(path), None) is not None:
            self._save()

    def _save(self) -> None:
        payload = {"version": 1, "files": dict(sorted(self._hashes.items()))}
        write_atomic(self.path, (json.dumps(payload, indent=2) + "\n").encode(), mode=0o600)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` in one step: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def state_of(path: Path, desired: bytes | None, manifest: Manifest) -> State:
    """The state of ``path``; ``desired`` None: anyfill's content is not known (removal)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "absent"
    except IsADirectoryError:
        return "foreign"
    if desired is not None and data == desired:
        return "current"
    recorded = manifest.recorded(path)
    if recorded is None:
        return "foreign"
    return "outdated" if recorded == digest(data) else "edited"


@dataclass
class Plan:
    """The writes and removals of one command, checked before anything is touched."""

    manifest: Manifest
    force: bool
    writes: list[tuple[Path, bytes, int]] = field(default_factory=list)
    removals: list[Path] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    def write(self, path: Path, data: bytes, mode: int = 0o644) -> None:
        state = state_of(path, data, self.manifest)
        if state == "current":
            self.manifest.record(path, data)  # a manifest lost and found again
            self.done.append(f"unchanged {path}")
            return
        if state in ("edited", "foreign") and not self.force:
            self.refused.append(_refusal(path, state))
            return
        self.writes.append((path, data, mode))

    def remove(self, path: Path) -> None:
        state = state_of(path, None, self.manifest)
        if state == "absent":
            self.manifest.forget(path)
            return
        if state in ("edited", "foreign") and not self.force:
            self.refused.append(_refusal(path, state))
            return
        self.removals.append(path)

    def apply(self) -> list[str]:
        """Carry the plan out, or raise without touching anything if a file was refused."""
        if self.refused:
            raise AutostartError(
                "; ".join(self.refused)
                + ". Nothing was changed: look at the file, or run again with --force "
                f"(the old file is kept as <name>{BACKUP_SUFFIX})"
            )
        for path, data, mode in self.writes:
            backup = self._backup_if_not_ours(path)
            write_atomic(path, data, mode)
            self.manifest.record(path, data)
            self.done.append(f"wrote {path}" + (f" (yours kept as {backup})" if backup else ""))
        for path in self.removals:
            backup = self._backup_if_not_ours(path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self.manifest.forget(path)
            self.done.append(f"removed {path}" + (f" (kept as {backup})" if backup else ""))
        return self.done

    def _backup_if_not_ours(self, path: Path) -> Path | None:
        if state_of(path, None, self.manifest) not in ("edited", "foreign"):
            return None
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        os.replace(path, backup)
        return backup


def _refusal(path: Path, state: State) -> str:
    if state == "edited":
        return f"{path} was changed since anyfill wrote it"
    return f"{path} was not written by anyfill"

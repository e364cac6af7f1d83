"""Downloading a catalogue model with huggingface_hub: asked size, progress, resume, checksum.

The wire is huggingface_hub's own: ``get_hf_file_metadata`` (a HEAD on the file's
``/resolve/`` URL: size, ETag, commit) and ``http_get`` (GET, with ``Range`` when resuming).
anyfill keeps the partial file itself (``<file>.part`` in the models folder) because
``hf_hub_download`` deletes its partial file on any failure, so an interrupted download
would start over; ``http_get`` appends to ours from where it stopped. The whole file's
SHA-256 is checked before it takes its final name; a wrong one is deleted, never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyfill.daemon.errors import AnyfillError
from anyfill.daemon.models.catalog import CatalogModel, human_size
from anyfill.daemon.models.store import part_path
from anyfill.daemon.version import version_string

__all__ = [
    "DownloadError",
    "ModelDownload",
    "Progress",
    "download_in_background",
    "download_model",
]

log = logging.getLogger("anyfill.models")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

Progress = Callable[[int, int], None]
"""Called with (bytes on disk, total bytes) as the download advances."""


class DownloadError(AnyfillError):
    """A model could not be downloaded; the message says why and what was kept."""


@dataclass(frozen=True)
class FileInfo:
    url: str
    size: int | None
    etag: str | None
    commit: str | None


def _headers() -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    # token=False: a public model needs no token, and a user's stored one is not ours to send.
    return dict(
        build_hf_headers(token=False, library_name="anyfill", library_version=version_string())
    )


def _where(endpoint: str | None) -> str:
    from huggingface_hub import constants

    return endpoint or constants.ENDPOINT


def file_info(model: CatalogModel, endpoint: str | None) -> FileInfo:
    """What the Hub says about the model's file (one HEAD request)."""
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    url = hf_hub_url(
        model.repo_id, model.filename, revision=model.revision, endpoint=endpoint or None
    )
    try:
        meta = get_hf_file_metadata(url, token=False, endpoint=endpoint or None, headers=_headers())
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise DownloadError(
            f"{_where(endpoint)} refused {model.repo_id}/{model.filename} (HTTP {status})"
        ) from exc
    except (httpx2.HTTPError, OSError) as exc:
        raise DownloadError(
            f"cannot reach {_where(endpoint)} to download {model.name}: {exc or type(exc).__name__}"
            "; check the network (or set models.endpoint / HF_ENDPOINT to a mirror)"
        ) from exc
    return FileInfo(meta.location, meta.size, meta.etag, meta.commit_hash)


def check_info(model: CatalogModel, info: FileInfo) -> None:
    """Refuse a file that is not the pinned one before downloading a byte of it."""
    if info.size is not None and info.size != model.size:
        raise DownloadError(
            f"the Hub serves {model.filename} with {info.size} bytes, anyfill expects "
            f"{model.size}: refused"
        )
    etag = (info.etag or "").strip('"').lower()
    if _SHA256.match(etag) and etag != model.sha256:
        raise DownloadError(
            f"the Hub reports SHA-256 {etag} for {model.filename}, anyfill expects "
            f"{model.sha256}: refused"
        )


def sha256_of(path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def _progress_class(progress: Progress | None) -> type[Any]:
    """A tqdm class that reports to ``progress`` and draws nothing itself."""
    from tqdm import tqdm

    class Reporting(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.done = int(kwargs.get("initial") or 0)
            self.size = int(kwargs.get("total") or 0)

        def update(self, n: float | None = 1) -> bool | None:
            self.done += int(n or 0)
            if progress is not None:
                progress(self.done, self.size)
            return bool(super().update(n))

    return Reporting


@contextlib.contextmanager
def _only_download_of(destination: Path, name: str) -> Iterator[None]:
    """One download per file at a time (the tray and the CLI would append to one .part)."""
    if sys.platform == "win32":  # no flock; two downloads at once fail the checksum instead
        yield
        return
    import fcntl

    lock_path = destination.with_name(destination.name + ".lock")
    with lock_path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DownloadError(
                f"{name} is already being downloaded (by another anyfill); wait for it"
            ) from None
        try:
            yield
        finally:
            lock_path.unlink(missing_ok=True)


def download_model(
    model: CatalogModel,
    destination: Path,
    *,
    endpoint: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Download ``model`` to ``destination`` (its final path); resumes a ``.part`` file.

    Raises :class:`DownloadError` with what to do; the final path only ever holds a file
    whose SHA-256 matched."""
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    with _only_download_of(destination, model.name):
        return _download(model, destination, endpoint, progress)


def _download(
    model: CatalogModel, destination: Path, endpoint: str | None, progress: Progress | None
) -> Path:
    import httpx2
    from huggingface_hub.file_download import http_get

    if destination.is_file():  # finished by the download that held the lock before
        return destination
    info = file_info(model, endpoint)
    check_info(model, info)
    part = part_path(destination)
    have = part.stat().st_size if part.exists() else 0
    if have > model.size:  # not a prefix of this file: start over
        part.unlink()
        have = 0
    free = shutil.disk_usage(destination.parent).free
    if free < model.size - have:
        raise DownloadError(
            f"{model.name} needs {human_size(model.size - have)} more in "
            f"{destination.parent}, which has {human_size(free)} free; free some space or "
            "set [models] dir to another disk"
        )
    if have:
        log.info("resuming %s at %s of %s", model.name, human_size(have), model.size_text)
    if progress is not None:
        progress(have, model.size)
    try:
        with part.open("ab") as handle:
            http_get(
                info.url,
                handle,
                resume_size=have,
                headers=_headers(),
                expected_size=model.size,
                displayed_filename=model.filename,
                tqdm_class=_progress_class(progress),
            )
    except (OSError, ValueError, httpx2.HTTPError) as exc:  # network, disk, size check
        kept = part.stat().st_size if part.exists() else 0
        raise DownloadError(
            f"the download of {model.name} stopped at {human_size(kept)} of {model.size_text}: "
            f"{exc or type(exc).__name__}; run the same command again to resume"
        ) from exc
    digest = sha256_of(part)
    if digest != model.sha256:
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"{model.filename} arrived with SHA-256 {digest}, anyfill expects {model.sha256}: "
            "the file was deleted; run the command again (a mirror serving other bytes "
            "fails the same way)"
        )
    part.replace(destination)
    return destination


@dataclass(frozen=True)
class ModelDownload:
    """Progress of a model download on the bus (the tray draws its bar from these).

    ``state``: 'running' (``done`` of ``total`` bytes), 'done', 'cancelled' (``done``
    bytes kept for a resume), or 'failed' with ``error``."""

    model: str
    state: str
    done: int = 0
    total: int = 0
    path: str = ""
    error: str = ""

    @property
    def topic(self) -> str:
        return f"state/models/{self.model}/download"


class _Stopped(BaseException):
    """Raised in the download thread at its next progress report once the caller cancelled
    (a BaseException, so no retry or error handler on the way swallows it)."""


async def download_in_background(
    model: CatalogModel,
    destination: Path,
    *,
    endpoint: str | None = None,
    publish: Callable[[ModelDownload], None],
    step: int = 8 * 1024 * 1024,
) -> Path:
    """:func:`download_model` in a worker thread, reporting on the bus through ``publish``
    (called in the event loop's thread, at most once per ``step`` bytes).

    Cancelling the awaiting task stops the thread at its next progress report and keeps
    the ``.part`` file, so the next download resumes; 'cancelled' is published then."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    last = [-step]
    stop = threading.Event()

    def progress(done: int, total: int) -> None:
        if stop.is_set():
            raise _Stopped
        if done - last[0] >= step or done == total:
            last[0] = done
            event = ModelDownload(model.name, "running", done, total)
            loop.call_soon_threadsafe(publish, event)

    worker = asyncio.ensure_future(
        asyncio.to_thread(download_model, model, destination, endpoint=endpoint, progress=progress)
    )
    try:
        path = await asyncio.shield(worker)
    except DownloadError as exc:
        publish(ModelDownload(model.name, "failed", error=str(exc)))
        raise
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(_Stopped, Exception):
            await worker  # the thread ends (and lets go of the file) before we say so
        part = part_path(destination)
        kept = part.stat().st_size if part.exists() else 0
        log.info("download of %s cancelled at %s", model.name, human_size(kept))
        publish(ModelDownload(model.name, "cancelled", kept, model.size))
        raise
    publish(ModelDownload(model.name, "done", model.size, model.size, path=str(path)))
    return path

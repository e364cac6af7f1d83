"""Downloading a catalogue model from the Hugging Face Hub: asked size, progress, resume,
checksum.

The Hub's wire is two requests, spoken with httpx (the HTTP client anyfill has anyway; the
huggingface_hub library would add a second HTTP stack and nine more distributions, 30 MB,
for them): a ``HEAD`` on ``{endpoint}/{repo}/resolve/{revision}/{file}``, which answers an LFS
file with a 302 to its CDN and ``X-Linked-Size``, ``X-Linked-Etag`` (the SHA-256) and
``X-Repo-Commit`` (relative redirects, a renamed repo, are followed; the first absolute one
is the file's address), then a ``GET`` on that address, with ``Range: bytes=N-`` when
resuming. A connection dropped mid-file is resumed within the run (a few times); an
interrupted run by the next one, from the partial file anyfill keeps (``<file>.part`` in the
models folder). The whole file's SHA-256 is checked before it takes its final name; a wrong
one is deleted, never used. No token is sent: the models are public.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urljoin

from anyfill.daemon.errors import AnyfillError
from anyfill.daemon.models.catalog import CatalogModel, human_size
from anyfill.daemon.models.store import part_path
from anyfill.daemon.version import version_string

if TYPE_CHECKING:
    import httpx

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


HUB = "https://huggingface.co"
CHUNK = 1024 * 1024
"""Bytes written (and reported) at a time."""
RESUMES = 5
"""Dropped connections resumed within one run before giving up (the next run resumes too)."""
REDIRECTS = 5
MIN_RATE = 100 * 1024
"""Bytes per second below which a download is given up (with :data:`BASE_TIME_S`)."""
BASE_TIME_S = 300.0


def time_limit_s(size: int) -> float:
    """How long one run may take for ``size`` bytes: a server that drips one byte a
    minute (under every read timeout) is stopped, a slow but real link is not."""
    return BASE_TIME_S + size / MIN_RATE


def _headers() -> dict[str, str]:
    # identity: the size and the Range offsets are those of the file's bytes, not of a
    # compressed transfer.
    agent = f"anyfill/{version_string()}; python/{platform.python_version()}"
    return {"User-Agent": agent, "Accept-Encoding": "identity"}


def _where(endpoint: str | None) -> str:
    return (endpoint or os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")


def _client() -> httpx.Client:
    import httpx

    # Proxies from the environment apply (trust_env), as for any download tool.
    timeout = httpx.Timeout(10.0, read=60.0)
    return httpx.Client(headers=_headers(), timeout=timeout, follow_redirects=False)


def file_info(model: CatalogModel, endpoint: str | None) -> FileInfo:
    """What the Hub says about the model's file (one HEAD request, or a few after relative
    redirects)."""
    import httpx

    where = _where(endpoint)
    url = (
        f"{where}/{model.repo_id}/resolve/{quote(model.revision, safe='')}/{quote(model.filename)}"
    )
    try:
        with _client() as client:
            answer = client.head(url)
            for _ in range(REDIRECTS):
                location = answer.headers.get("location", "")
                if not answer.is_redirect or "://" in location:
                    break
                answer = client.head(urljoin(str(answer.url), location))
    except (httpx.HTTPError, OSError) as exc:
        raise DownloadError(
            f"cannot reach {where} to download {model.name}: {exc or type(exc).__name__}"
            "; check the network (or set models.endpoint / HF_ENDPOINT to a mirror)"
        ) from exc
    if answer.status_code >= 400:
        raise DownloadError(
            f"{where} refused {model.repo_id}/{model.filename} (HTTP {answer.status_code})"
        )
    headers = answer.headers
    location = headers.get("location", "") if answer.is_redirect else ""
    size = headers.get("x-linked-size") or headers.get("content-length")
    return FileInfo(
        urljoin(str(answer.url), location) if location else str(answer.url),
        int(size) if size and size.isdigit() else None,
        headers.get("x-linked-etag") or headers.get("etag"),
        headers.get("x-repo-commit"),
    )


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
    time_limit: float | None = None,
) -> Path:
    """Download ``model`` to ``destination`` (its final path); resumes a ``.part`` file.

    Never writes more than the catalogue's size, nor past ``time_limit`` seconds
    (:func:`time_limit_s` of the size by default). Raises :class:`DownloadError` with what
    to do; the final path only ever holds a file whose SHA-256 matched."""
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    limit = time_limit if time_limit is not None else time_limit_s(model.size)
    with _only_download_of(destination, model.name):
        return _download(model, destination, endpoint, progress, limit)


def _download(
    model: CatalogModel,
    destination: Path,
    endpoint: str | None,
    progress: Progress | None,
    limit: float,
) -> Path:
    import httpx

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
        _fetch(info.url, part, model.size, progress, time.monotonic() + limit)
    except (OSError, httpx.HTTPError, DownloadError) as exc:  # network, disk, what was served
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # The space is the user's: a partial file on a full disk (or a full quota) is
            # no help to them.
            part.unlink(missing_ok=True)
            raise DownloadError(
                f"the download of {model.name} stopped: {destination.parent} is full; the "
                "partial file was deleted; free some space or set [models] dir to another disk"
            ) from exc
        kept = part.stat().st_size if part.exists() else 0
        if not kept:
            part.unlink(missing_ok=True)
        then = "run the same command again to resume" if kept else "nothing was kept"
        raise DownloadError(
            f"the download of {model.name} stopped at {human_size(kept)} of {model.size_text}: "
            f"{exc or type(exc).__name__}; {then}"
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


def _fetch(url: str, part: Path, total: int, progress: Progress | None, deadline: float) -> None:
    """Append the file's bytes to ``part`` from where it ends, resuming after a dropped
    connection up to RESUMES times; each piece is reported once it is written. Stops at
    ``total`` bytes whatever the server sends (a longer body is not this file: the
    checksum then says so) and at ``deadline`` (``time.monotonic()``)."""
    import httpx

    have = part.stat().st_size if part.exists() else 0
    started, first = time.monotonic(), have
    resumes = 0

    def too_slow() -> DownloadError:
        took = time.monotonic() - started
        return DownloadError(
            f"too slow: {human_size(have - first)} in {took:.0f} s (a download that stays "
            f"under {human_size(MIN_RATE)}/s is given up)"
        )

    with _client() as client:
        while have < total:
            wanted = {"Range": f"bytes={have}-"} if have else {}
            left = deadline - time.monotonic()
            if left <= 0:
                raise too_slow()
            timeout = httpx.Timeout(min(10.0, left), read=min(60.0, left))
            try:
                with client.stream("GET", url, headers=wanted, timeout=timeout) as answer:
                    if answer.status_code not in (200, 206):
                        raise DownloadError(
                            f"the file's address answered HTTP {answer.status_code}"
                        )
                    if have and answer.status_code == 200:  # Range ignored: from the start
                        part.write_bytes(b"")
                        have = 0
                    with part.open("ab") as handle:
                        for piece in answer.iter_bytes(CHUNK):
                            handle.write(piece[: total - have])
                            have += min(len(piece), total - have)
                            if progress is not None:
                                progress(have, total)
                            if have >= total:
                                break  # closes the connection: no byte past the file
                            if time.monotonic() > deadline:
                                raise too_slow()
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise too_slow() from None
                resumes += 1
                if resumes > RESUMES:
                    raise
                log.info("connection dropped at %s; resuming", human_size(have))
                time.sleep(min(0.2 * resumes, 2.0))
                continue
            if have < total:  # the server ended the body early without an error
                resumes += 1
                if resumes > RESUMES:
                    raise DownloadError(f"the server sent {have} of {total} bytes")


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

"""The Hugging Face Hub's file endpoints, as ``huggingface_hub`` meets them, on loopback.

``HEAD /{repo}/resolve/{revision}/{file}`` answers like the Hub does for an LFS file: a
302 to the file's CDN address with ``X-Repo-Commit``, ``X-Linked-Size`` and
``X-Linked-Etag`` (the quoted SHA-256 of the content), ``ETag`` and ``Accept-Ranges``.
Run the responder on two servers (the Hub and its CDN, two origins) with ``cdn_url`` set,
so that huggingface_hub stops at the 302 as it does on the real Hub. ``GET`` on the CDN
address serves the bytes, honouring ``Range: bytes=N-`` with a 206 and
``Content-Range``. An unknown repo or file is a 404 with the Hub's ``X-Error-Code``.

Knobs for the failure tests: ``drop_after`` closes the connection mid-body after that many
bytes (``drops`` times), ``content`` serves other bytes than the ones announced (a bad
mirror), ``announced_sha256`` reports another checksum, ``hold_after`` stops sending after
that many bytes until the test sets ``release`` (a stalled link, while the test changes
the world under the download).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from dataclasses import dataclass, field

from tests.servers.http import ClientGone, RecordedRequest, Response

CHUNK = 64 * 1024


@dataclass
class HubFile:
    repo_id: str
    filename: str
    revision: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class HfHub:
    files: list[HubFile]
    drop_after: int | None = None
    drops: int = 1
    content: bytes | None = None
    announced_sha256: str | None = None
    announced_size: int | None = None
    cdn_url: str = ""
    """Where the 302 points (another origin, as the Hub's CDN is); empty: this server."""
    served_bytes: list[int] = field(default_factory=list)
    """Body bytes sent per GET, in order."""
    hold_after: int | None = None
    """Stop sending after this many body bytes of a GET, set ``holding`` and wait (up to
    60 s) until ``release`` is set, then send the rest."""
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    chunk_delay_s: float = 0.0
    """A pause after each 64 KiB sent: a slow link, so a user can cancel mid-download."""
    ignore_range: bool = False
    """Answer a ranged GET with the whole file (200), as a mirror without range support."""
    endless: bool = False
    """After the file, keep sending zero bytes (a chunked body with no end) until the
    client goes away (or 256 MiB, a safety stop for the test machine)."""

    def handles(self, method: str, path: str) -> bool:
        return method in ("HEAD", "GET")

    def _find(self, path: str) -> HubFile | None:
        for hub_file in self.files:
            resolve = f"/{hub_file.repo_id}/resolve/{hub_file.revision}/{hub_file.filename}"
            if path in (resolve, f"/cdn/{hub_file.sha256}"):
                return hub_file
        return None

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        hub_file = self._find(request.path)
        if hub_file is None:
            await response.start(
                404,
                {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"},
                content_length=0,
            )
            response.record.finished = True
            return
        if request.path.startswith("/cdn/"):
            await self._serve_bytes(request, response, hub_file)
        else:
            await self._resolve(request, response, hub_file)

    async def _resolve(
        self, request: RecordedRequest, response: Response, hub_file: HubFile
    ) -> None:
        host = request.headers["host"]
        sha = self.announced_sha256 or hub_file.sha256
        location = f"{self.cdn_url or 'http://' + host}/cdn/{hub_file.sha256}"
        note = f"Found. Redirecting to {location}".encode()
        headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Location": location,
            "X-Repo-Commit": hub_file.revision,
            "X-Linked-Size": str(self.announced_size or len(hub_file.data)),
            "X-Linked-Etag": f'"{sha}"',
            "ETag": f'"{hashlib.sha1(hub_file.data).hexdigest()}"',
            "Accept-Ranges": "bytes",
        }
        if request.method == "HEAD":
            await response.start(302, headers, content_length=len(note))
            response.record.finished = True
        else:
            await response.body(302, note, headers)

    async def _serve_bytes(
        self, request: RecordedRequest, response: Response, hub_file: HubFile
    ) -> None:
        data = self.content if self.content is not None else hub_file.data
        size = len(data)
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "ETag": f'"{hub_file.sha256}"',
        }
        start = 0
        wanted = "" if self.ignore_range else request.headers.get("range", "")
        if wanted.startswith("bytes=") and wanted.endswith("-"):
            start = int(wanted[len("bytes=") : -1])
            headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        status = 206 if wanted else 200
        if request.method == "HEAD":
            await response.start(status, headers, content_length=size - start)
            response.record.finished = True
            return
        if self.endless:
            await self._serve_endlessly(response, status, headers, data[start:])
            return
        await response.start(status, headers, content_length=size - start)
        sent = 0
        limit = None
        if self.drop_after is not None and self.drops > 0:
            self.drops -= 1
            limit = self.drop_after
        self.served_bytes.append(0)
        for offset in range(start, size, CHUNK):
            piece = data[offset : offset + CHUNK]
            if limit is not None and sent + len(piece) > limit:
                piece = piece[: limit - sent]
                await response.write(piece)
                self.served_bytes[-1] += len(piece)
                response.drop()
                return
            await response.write(piece)
            sent += len(piece)
            self.served_bytes[-1] += len(piece)
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            if self.hold_after is not None and sent >= self.hold_after:
                self.hold_after = None
                self.holding.set()
                for _ in range(6000):  # 60 s at most
                    if self.release.is_set():
                        break
                    await asyncio.sleep(0.01)
        await response.end()

    async def _serve_endlessly(
        self, response: Response, status: int, headers: dict[str, str], data: bytes
    ) -> None:
        await response.start(status, headers)  # chunked: no length says where it ends
        self.served_bytes.append(0)
        zeros = bytes(CHUNK)
        try:
            for offset in range(0, len(data), CHUNK):
                await response.write(data[offset : offset + CHUNK])
                self.served_bytes[-1] += len(data[offset : offset + CHUNK])
            while self.served_bytes[-1] < 256 * 2**20:
                await response.write(zeros)
                self.served_bytes[-1] += CHUNK
        except ClientGone:
            return
        response.drop()

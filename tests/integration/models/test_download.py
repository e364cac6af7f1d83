"""Downloading a model from a loopback Hub speaking the Hub's wire (HEAD, 302, ranged GET).

The Hub here (tests/servers/hfhub.py) answers HEAD and ranged GET as the real one does for
an LFS file. It serves the tests' tiny FIM GGUF when the llama.cpp assets are built, else
deterministic bytes of about the same size (the wire is the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.daemon.bus import EventBus
from anyfill.daemon.models.catalog import CatalogModel
from anyfill.daemon.models.download import (
    DownloadError,
    ModelDownload,
    download_in_background,
    download_model,
)
from anyfill.daemon.models.store import part_path
from tests.llm.server import TINY_FIM_MODEL, find_assets
from tests.servers.hfhub import HfHub, HubFile
from tests.servers.http import LoopbackServer, RecordedRequest

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _payload() -> bytes:
    assets = find_assets()
    if assets is not None:
        return (assets / TINY_FIM_MODEL).read_bytes()
    return random.Random(7).randbytes(24_000_000)


DATA = _payload()
HUB_FILE = HubFile("anyfill-tests/tiny-fim-GGUF", "tiny-fim.gguf", REVISION, DATA)
MODEL = CatalogModel(
    name="tiny-fim",
    label="tiny FIM test model",
    repo_id=HUB_FILE.repo_id,
    filename=HUB_FILE.filename,
    revision=REVISION,
    size=len(DATA),
    sha256=hashlib.sha256(DATA).hexdigest(),
    license="test",
    note="",
)


class Hub:
    """The Hub and its CDN: one responder on two loopback origins."""

    def __init__(self, responder: HfHub, hub: LoopbackServer, cdn: LoopbackServer) -> None:
        self.responder = responder
        self.url = hub.url
        self.hub = hub
        self.cdn = cdn

    @property
    def requests(self) -> list[RecordedRequest]:
        return sorted([*self.hub.requests, *self.cdn.requests], key=lambda r: r.at)

    def wire(self) -> list[tuple[str, str, str, str]]:
        return [
            (
                r.method,
                "hub" if r in self.hub.requests else "cdn",
                r.path,
                r.headers.get("range", ""),
            )
            for r in self.requests
        ]


@pytest.fixture
def hub() -> Iterator[Hub]:
    responder = HfHub([HUB_FILE])
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        yield Hub(responder, hub, cdn)


def test_download_speaks_the_hub_protocol_and_reports_progress(hub: Hub, tmp_path: Path) -> None:
    server = hub
    seen: list[tuple[int, int]] = []
    target = tmp_path / "models" / MODEL.filename

    path = download_model(
        MODEL, target, endpoint=server.url, progress=lambda d, t: seen.append((d, t))
    )

    assert path == target
    assert target.read_bytes() == DATA
    assert not part_path(target).exists()
    resolve = f"/{MODEL.repo_id}/resolve/{REVISION}/{MODEL.filename}"
    assert server.wire() == [
        ("HEAD", "hub", resolve, ""),
        ("GET", "cdn", f"/cdn/{MODEL.sha256}", ""),
    ]
    head = server.requests[0].headers
    assert head["accept-encoding"] == "identity"
    assert "anyfill/" in head["user-agent"]
    assert "authorization" not in head
    assert seen[0] == (0, len(DATA))
    assert seen[-1] == (len(DATA), len(DATA))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert len(seen) > 2  # it advanced in steps, not only at the end


def test_a_dropped_connection_resumes_with_a_range_request(hub: Hub, tmp_path: Path) -> None:
    responder, server = hub.responder, hub
    responder.drop_after = 12_000_000
    target = tmp_path / MODEL.filename

    download_model(MODEL, target, endpoint=server.url)

    assert target.read_bytes() == DATA
    gets = [r for r in server.requests if r.method == "GET"]
    assert len(gets) == 2
    assert "range" not in gets[0].headers
    start = int(gets[1].headers["range"].removeprefix("bytes=").removesuffix("-"))
    assert 0 < start <= 12_000_000
    assert responder.served_bytes == [12_000_000, len(DATA) - start]


class Stop(BaseException):
    """What a Ctrl+C in the middle of a download looks like to the code."""


def test_an_interrupted_download_resumes_in_the_next_run(hub: Hub, tmp_path: Path) -> None:
    responder, server = hub.responder, hub
    target = tmp_path / MODEL.filename

    def interrupt(done: int, total: int) -> None:
        # Each piece is reported once written: stopping halfway keeps what came so far.
        if done >= total // 2:
            raise Stop

    with pytest.raises(Stop):
        download_model(MODEL, target, endpoint=server.url, progress=interrupt)
    kept = part_path(target).stat().st_size
    assert 0 < kept < len(DATA)
    assert not target.exists()

    seen: list[int] = []
    download_model(MODEL, target, endpoint=server.url, progress=lambda d, t: seen.append(d))

    assert target.read_bytes() == DATA
    assert not part_path(target).exists()
    last_get = [r for r in server.requests if r.method == "GET"][-1]
    assert last_get.headers["range"] == f"bytes={kept}-"
    assert responder.served_bytes[-1] == len(DATA) - kept
    assert seen[0] == kept


def test_a_mirror_that_ignores_the_range_starts_over(hub: Hub, tmp_path: Path) -> None:
    responder, server = hub.responder, hub
    target = tmp_path / MODEL.filename
    part_path(target).write_bytes(DATA[:1_000_000])  # left by an earlier run
    responder.ignore_range = True

    download_model(MODEL, target, endpoint=server.url)

    assert target.read_bytes() == DATA  # not the old part followed by the whole file
    gets = [r for r in server.requests if r.method == "GET"]
    assert [g.headers.get("range") for g in gets] == ["bytes=1000000-"]
    assert responder.served_bytes == [len(DATA)]


def test_a_wrong_checksum_is_refused_and_the_partial_file_removed(hub: Hub, tmp_path: Path) -> None:
    responder, server = hub.responder, hub
    corrupt = bytearray(DATA)
    corrupt[len(corrupt) // 2] ^= 0xFF
    responder.content = bytes(corrupt)  # a mirror that serves other bytes than it announces
    target = tmp_path / MODEL.filename

    with pytest.raises(DownloadError, match="SHA-256") as caught:
        download_model(MODEL, target, endpoint=server.url)

    assert "deleted" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_hub_announcing_another_file_is_refused_before_downloading(
    hub: Hub, tmp_path: Path
) -> None:
    responder, server = hub.responder, hub
    responder.announced_sha256 = "f" * 64
    target = tmp_path / MODEL.filename

    with pytest.raises(DownloadError, match=r"reports SHA-256 f{64}"):
        download_model(MODEL, target, endpoint=server.url)

    assert [r.method for r in server.requests] == ["HEAD"]
    assert list(tmp_path.iterdir()) == []


def test_no_network_is_a_clear_error_and_writes_nothing(refused_url: str, tmp_path: Path) -> None:
    target = tmp_path / "models" / MODEL.filename

    with pytest.raises(DownloadError, match=r"cannot reach http://127\.0\.0\.1:\d+") as caught:
        download_model(MODEL, target, endpoint=refused_url)

    assert "check the network" in str(caught.value)
    assert not target.exists()
    assert not part_path(target).exists()


def test_an_unknown_file_is_named_in_the_error(hub: Hub, tmp_path: Path) -> None:
    server = hub
    other = CatalogModel(**{**MODEL.__dict__, "filename": "missing.gguf"})

    with pytest.raises(DownloadError, match=r"refused .*missing\.gguf \(HTTP 404\)"):
        download_model(other, tmp_path / "missing.gguf", endpoint=server.url)
    assert list(tmp_path.iterdir()) == []


async def test_a_background_download_reports_on_the_bus(hub: Hub, tmp_path: Path) -> None:
    """What the tray listens to while it downloads (the daemon's loop stays free)."""
    bus = EventBus()
    events = bus.subscribe(ModelDownload)
    target = tmp_path / MODEL.filename

    path = await download_in_background(
        MODEL, target, endpoint=hub.url, publish=bus.publish, step=1
    )

    assert path == target
    seen: list[ModelDownload] = []
    with contextlib.suppress(asyncio.QueueEmpty):
        while True:
            seen.append(events.get_nowait())
    assert seen[-1] == ModelDownload(MODEL.name, "done", len(DATA), len(DATA), path=str(target))
    running = [e.done for e in seen if e.state == "running"]
    assert running[0] == 0
    assert running[-1] == len(DATA)
    assert seen[0].topic == "state/models/tiny-fim/download"


async def test_a_failed_background_download_says_why_on_the_bus(
    refused_url: str, tmp_path: Path
) -> None:
    bus = EventBus()
    events = bus.subscribe(ModelDownload)
    with pytest.raises(DownloadError):
        await download_in_background(
            MODEL, tmp_path / MODEL.filename, endpoint=refused_url, publish=bus.publish
        )
    event = events.get_nowait()
    assert event.state == "failed"
    assert "cannot reach" in event.error


def test_a_file_larger_than_the_free_space_is_refused_before_downloading(
    hub: Hub, tmp_path: Path
) -> None:
    huge = 10**18  # more than any disk has free
    hub.responder.announced_size = huge
    model = CatalogModel(**{**MODEL.__dict__, "size": huge})

    with pytest.raises(DownloadError, match=r"needs 1000000\.0 TB more in .* free"):
        download_model(model, tmp_path / MODEL.filename, endpoint=hub.url)

    assert [r.method for r in hub.requests] == ["HEAD"]
    assert list(tmp_path.iterdir()) == []


def test_a_second_download_of_the_same_file_is_refused_while_one_runs(
    hub: Hub, tmp_path: Path
) -> None:
    import fcntl

    target = tmp_path / MODEL.filename
    with (tmp_path / (MODEL.filename + ".lock")).open("w") as running:
        fcntl.flock(running, fcntl.LOCK_EX)  # what a download in another process holds
        with pytest.raises(DownloadError, match="already being downloaded"):
            download_model(MODEL, target, endpoint=hub.url)
    assert hub.requests == []
    download_model(MODEL, target, endpoint=hub.url)  # once it is over, it goes through
    assert target.read_bytes() == DATA
    assert sorted(p.name for p in tmp_path.iterdir()) == [MODEL.filename]


SMALL_DATA = random.Random(11).randbytes(2 * 2**20)
SMALL_FILE = HubFile("anyfill-tests/small-GGUF", "small.gguf", REVISION, SMALL_DATA)
SMALL_MODEL = CatalogModel(
    **{
        **MODEL.__dict__,
        "name": "small",
        "repo_id": SMALL_FILE.repo_id,
        "filename": SMALL_FILE.filename,
        "size": len(SMALL_DATA),
        "sha256": SMALL_FILE.sha256,
    }
)


CHUNK_SENT_FIRST = 2**20
"""What the stalled server sends before the disk fills: one of the download's writes."""


@pytest.fixture
def small_hub() -> Iterator[Hub]:
    responder = HfHub([SMALL_FILE])
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        yield Hub(responder, hub, cdn)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 3 MiB tmpfs (mounted as root; skipped otherwise)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def used(mount: Path) -> int:
    import shutil

    usage = shutil.disk_usage(mount)
    return usage.total - usage.free


@pytest.mark.parametrize("content", ["right", "wrong"])
def test_an_endless_body_stops_at_the_catalogue_size_on_a_small_disk(
    small_hub: Hub, small_disk: Path, content: str
) -> None:
    """Issue 24: the partial file grew to whatever was sent and filled the disk."""
    small_hub.responder.endless = True
    if content == "wrong":  # other bytes, and then no end
        small_hub.responder.content = bytes(len(SMALL_DATA))
    target = small_disk / SMALL_MODEL.filename
    if content == "right":
        assert download_model(SMALL_MODEL, target, endpoint=small_hub.url) == target
        assert target.read_bytes() == SMALL_DATA
    else:
        with pytest.raises(DownloadError, match="arrived with SHA-256") as info:
            download_model(SMALL_MODEL, target, endpoint=small_hub.url)
        assert "the file was deleted" in str(info.value)
        assert not target.exists()
    assert not part_path(target).exists()
    assert used(small_disk) <= len(SMALL_DATA) + 64 * 1024  # never more than the file
    assert small_hub.responder.served_bytes[-1] < 64 * 2**20  # it hung up, it did not drain


def test_a_model_larger_than_the_small_disk_is_refused_before_a_byte(
    small_hub: Hub, small_disk: Path
) -> None:
    big = bytes(4 * 2**20)
    small_hub.responder.files.append(HubFile("anyfill-tests/big", "big.gguf", REVISION, big))
    model = CatalogModel(
        **{
            **SMALL_MODEL.__dict__,
            "repo_id": "anyfill-tests/big",
            "filename": "big.gguf",
            "size": len(big),
            "sha256": hashlib.sha256(big).hexdigest(),
        }
    )
    with pytest.raises(DownloadError, match=r"needs 4 MB more in .*disk, which has 3 MB free"):
        download_model(model, small_disk / "big.gguf", endpoint=small_hub.url)
    assert [r.method for r in small_hub.requests] == ["HEAD"]
    assert list(small_disk.iterdir()) == []


def fill(path: Path) -> int:
    """Another program (dd) writes zeros to ``path`` until the disk is full; returns the
    bytes it kept."""
    import subprocess

    command = ["dd", "if=/dev/zero", f"of={path}", "bs=64k"]
    dd = subprocess.run(command, check=False, capture_output=True, text=True)
    assert dd.returncode != 0
    assert "No space left on device" in dd.stderr, dd.stderr
    return path.stat().st_size


def test_a_disk_that_fills_during_the_download_is_named_and_only_the_partial_file_goes(
    small_hub: Hub, small_disk: Path
) -> None:
    """The free-space check passes (3 MiB free for 2 MiB), then another program fills the
    disk while the first MiB is on it and the server stalls: the next write fails with
    ENOSPC. The partial file is deleted (it is no use on a full disk) and nothing else;
    the message says the disk is full and does not offer a resume."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    theirs = small_disk / "other.gguf"  # the user's, there before the download
    theirs.write_bytes(b"kept" * 25_000)
    responder = small_hub.responder
    responder.hold_after = CHUNK_SENT_FIRST
    target = small_disk / SMALL_MODEL.filename
    part = part_path(target)
    with ThreadPoolExecutor(1) as pool:
        try:
            running = pool.submit(download_model, SMALL_MODEL, target, endpoint=small_hub.url)
            assert responder.holding.wait(30), "the download never started"
            deadline = time.monotonic() + 30
            while not (part.exists() and part.stat().st_size == CHUNK_SENT_FIRST):
                assert time.monotonic() < deadline, "the first MiB never reached the disk"
                assert not running.done(), running.exception()
                time.sleep(0.01)
            filler = small_disk / "filler"
            filled = fill(filler)
        finally:
            responder.release.set()
        error = running.exception(timeout=60)

    assert isinstance(error, DownloadError), error
    message = str(error)
    assert f"{small_disk} is full" in message, message
    assert "the partial file was deleted" in message, message
    assert "resume" not in message, message
    assert not part.exists()
    assert not target.exists()
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "other.gguf"]
    assert theirs.read_bytes() == b"kept" * 25_000
    assert filler.stat().st_size == filled
    assert responder.served_bytes[-1] > CHUNK_SENT_FIRST  # it failed on a write, not a read


def test_a_slow_drip_is_stopped_by_the_overall_time_bound(small_hub: Hub, tmp_path: Path) -> None:
    small_hub.responder.chunk_delay_s = 0.5  # 64 KiB every 0.5 s: 16 s for the file
    target = tmp_path / SMALL_MODEL.filename
    with pytest.raises(DownloadError, match=r"too slow: .* in \d+ s") as info:
        download_model(SMALL_MODEL, target, endpoint=small_hub.url, time_limit=2)
    assert "run the same command again to resume" in str(info.value)  # bytes were kept
    assert 0 < part_path(target).stat().st_size < len(SMALL_DATA)


def test_the_default_time_bound_lets_a_slow_real_link_finish() -> None:
    from anyfill.daemon.models.download import time_limit_s

    # 531 MB at 1 Mbit/s (125 kB/s) takes 71 minutes: inside the bound.
    assert time_limit_s(531_068_128) > 531_068_128 / 125_000

"""A managed backend without its binary or its model: a clear error with the fix, at once,
the same on the bus for the tray, and in ``anyfill doctor``. No llama-server is needed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from anyfill.config.model import BackendConfig, ModelsConfig, RoutingConfig, Settings
from anyfill.daemon.backends.base import FimPrompt
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.bus import EventBus
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.doctor.checks import diagnose
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import BackendUnavailable, ConfigError
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.managed.supervisor import free_port, remove_stale_keys
from anyfill.daemon.models.catalog import find
from anyfill.daemon.models.download import DownloadError, ModelDownload
from tests.servers.fixtures import StartServer
from tests.servers.hfhub import HfHub, HubFile
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp

PROMPT = FimPrompt(prefix="def f():\n    return ", suffix="\n", max_tokens=4)


def _config(binary: str, model: str) -> BackendConfig:
    return BackendConfig.model_validate(
        {
            "name": "managed",
            "type": "llamacpp-managed",
            "model": model,
            "server": {"binary": binary},
        }
    )


@pytest.fixture
def no_llama_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ANYFILL_LLAMA_CACHE", str(tmp_path / "no-build"))


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    """An executable that exists (the model check comes after the binary's)."""
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 3\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _read(path: Path) -> str:
    return path.read_text()


async def _ask(backend: ManagedLlamaCppBackend) -> None:
    async with closing_stream(backend.stream(PROMPT)) as chunks:
        async for _ in chunks:
            pass


async def test_missing_binary_fails_at_once_with_the_install_hint(
    no_llama_on_path: None, tmp_path: Path
) -> None:
    bus = EventBus()
    events = bus.subscribe(ManagedServerChanged)
    config = _config("", str(tmp_path / "m.gguf"))
    async with make_client(config) as client:
        backend = ManagedLlamaCppBackend(config, client, bus=bus, logs=tmp_path / "logs")
        with pytest.raises(BackendUnavailable, match="llama-server is not installed") as caught:
            await _ask(backend)
        await backend.aclose()
    assert "apt install llama.cpp" in str(caught.value)
    assert "scripts/setup --local" in str(caught.value)
    first = events.get_nowait()
    assert first.state == "missing_binary"
    assert "scripts/setup --local" in first.fix
    assert first.topic == "state/backends/managed/server"


async def test_missing_catalog_model_names_size_place_and_command(
    fake_binary: Path, tmp_path: Path
) -> None:
    bus = EventBus()
    events = bus.subscribe(ManagedServerChanged)
    config = _config(str(fake_binary), "qwen2.5-coder-0.5b")
    models = ModelsConfig(dir=str(tmp_path / "models"))
    async with make_client(config) as client:
        backend = ManagedLlamaCppBackend(
            config, client, bus=bus, models=models, logs=tmp_path / "logs"
        )
        with pytest.raises(BackendUnavailable, match=r"anyfill model pull qwen2\.5-coder-0\.5b"):
            await _ask(backend)
        latest = backend.supervisor.last_event  # for a tray that starts listening late
        assert latest.state == "missing_model"
        assert latest.fix == "anyfill model pull qwen2.5-coder-0.5b"
        await backend.aclose()
    event = events.get_nowait()
    assert event.state == "missing_model"
    assert event.fix == "anyfill model pull qwen2.5-coder-0.5b"
    assert event.model_size == 531_068_128
    assert event.model_dir == str(tmp_path / "models")
    assert "531 MB" in event.detail
    assert not (tmp_path / "logs").exists()  # nothing was started


async def test_a_model_that_appears_later_is_picked_up(fake_binary: Path, tmp_path: Path) -> None:
    """After 'anyfill model pull' (or the tray's download) the next request starts it."""
    config = _config(str(fake_binary), str(tmp_path / "late.gguf"))
    async with make_client(config) as client:
        backend = ManagedLlamaCppBackend(config, client, logs=tmp_path / "logs")
        with pytest.raises(BackendUnavailable, match="no model file at"):
            await _ask(backend)
        (tmp_path / "late.gguf").write_bytes(b"GGUF")
        # The fake binary exits at once: the supervisor now starts it, sees it die, says so.
        with pytest.raises(BackendUnavailable, match="exited with code 3"):
            await _ask(backend)
        await backend.aclose()
    log = _read(tmp_path / "logs" / "llama-server-managed.log")
    assert "anyfill starts:" in log
    assert "late.gguf" in log


async def test_doctor_says_which_binary_and_which_model(
    no_llama_on_path: None, fake_binary: Path, tmp_path: Path
) -> None:
    models = ModelsConfig(dir=str(tmp_path / "models"))
    missing = Settings(
        backends=[_config("", "qwen2.5-coder-1.5b")],
        routing=RoutingConfig(default=["managed"]),
        models=models,
    )
    lines = {f.topic: f for f in await diagnose(missing, tmp_path / "c.toml", environ={})}
    assert lines["backend managed binary"].status == "fail"
    assert "scripts/setup --local" in lines["backend managed binary"].detail
    assert lines["backend managed model"].status == "warn"
    assert "anyfill model pull qwen2.5-coder-1.5b" in lines["backend managed model"].detail
    assert "1.65 GB" in lines["backend managed model"].detail

    gguf = tmp_path / "models" / "qwen2.5-coder-1.5b-q8_0.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" * 1000)
    present = Settings(
        backends=[_config(str(fake_binary), "qwen2.5-coder-1.5b")],
        routing=RoutingConfig(default=["managed"]),
        models=models,
    )
    lines = {f.topic: f for f in await diagnose(present, tmp_path / "c.toml", environ={})}
    assert lines["backend managed binary"].status == "ok"
    assert f"{fake_binary} (from config" in lines["backend managed binary"].detail
    assert lines["backend managed model"].status == "ok"
    assert str(gguf) in lines["backend managed model"].detail
    assert _read(gguf) == "GGUF" * 1000  # doctor only looked


async def test_doctor_does_not_fail_an_absent_server_the_managed_one_replaces(
    fake_binary: Path, tmp_path: Path, refused_url: str
) -> None:
    gguf = tmp_path / "any.gguf"
    gguf.write_bytes(b"GGUF")
    settings = Settings(
        backends=[
            BackendConfig(name="llamacpp", type="llamacpp", url=refused_url),
            _config(str(fake_binary), str(gguf)),
        ],
        routing=RoutingConfig(default=["llamacpp", "managed"]),
    )
    lines = {f.topic: f for f in await diagnose(settings, tmp_path / "c.toml", environ={})}
    assert lines["backend llamacpp"].status == "ok"
    assert lines["backend llamacpp"].detail == (
        f"no server at {refused_url}: none needed, 'managed' (run by anyfill) serves instead"
    )


async def test_the_trays_download_call_reports_a_refused_file_on_the_bus(
    fake_binary: Path, tmp_path: Path
) -> None:
    """What the tray calls after the user agreed: the download goes to the models folder of
    the config, through the configured endpoint, and its outcome is on the bus."""
    small = find("qwen2.5-coder-0.5b")
    assert small is not None
    wrong = HubFile(small.repo_id, small.filename, small.revision, b"GGUF" + bytes(100))
    responder = HfHub([wrong])
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        bus = EventBus()
        downloads = bus.subscribe(ModelDownload)
        config = _config(str(fake_binary), small.name)
        models = ModelsConfig(dir=str(tmp_path / "models"), endpoint=hub.url)
        async with make_client(config) as client:
            backend = ManagedLlamaCppBackend(
                config, client, bus=bus, models=models, logs=tmp_path / "logs"
            )
            with pytest.raises(DownloadError, match="refused"):
                await backend.download_model()
            with pytest.raises(BackendUnavailable):  # still missing: nothing was started
                await _ask(backend)
            await backend.aclose()
        assert [r.path for r in hub.requests] == [
            f"/{small.repo_id}/resolve/{small.revision}/{small.filename}"
        ]
    event = downloads.get_nowait()
    assert event.state == "failed"
    assert "anyfill expects 531068128" in event.error
    assert not (tmp_path / "models").exists() or list((tmp_path / "models").iterdir()) == []


async def test_a_model_given_as_a_path_cannot_be_downloaded(tmp_path: Path) -> None:
    config = _config("", str(tmp_path / "mine.gguf"))
    async with make_client(config) as client:
        backend = ManagedLlamaCppBackend(config, client, logs=tmp_path)
        with pytest.raises(ConfigError, match="a file anyfill cannot download"):
            await backend.download_model()


async def test_a_missing_model_passes_the_request_to_the_next_backend(
    fake_binary: Path, tmp_path: Path, loopback: StartServer
) -> None:
    """Put first in the chain and not ready, the managed backend does not block the others."""
    srv = await loopback(LlamaCpp())
    managed = _config(str(fake_binary), str(tmp_path / "absent.gguf"))
    theirs = BackendConfig(name="theirs", type="llamacpp", url=srv.url)
    settings = Settings(
        backends=[managed, theirs], routing=RoutingConfig(default=["managed", "theirs"])
    )
    async with Engine(settings) as engine:
        completion = await engine.complete(
            CompletionRequest(Context(prefix="x = ", suffix="\n"), max_tokens=4)
        )
    assert completion.backend == "theirs"


async def test_a_failure_of_the_supervisor_itself_is_reported_and_retried(
    fake_binary: Path, tmp_path: Path
) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")

    def broken_picker() -> int:
        raise RuntimeError("no ports today")

    config = _config(str(fake_binary), str(gguf))
    async with make_client(config) as client:
        backend = ManagedLlamaCppBackend(
            config, client, logs=tmp_path / "logs", pick_port=broken_picker
        )
        with pytest.raises(BackendUnavailable, match=r"supervisor failed \(RuntimeError: no po"):
            await _ask(backend)
        assert backend.supervisor.state == "failed"
        backend.supervisor.pick_port = free_port
        with pytest.raises(BackendUnavailable, match="exited with code 3"):  # it tried again
            await _ask(backend)
        await backend.aclose()


def test_keys_left_by_killed_daemons_are_removed(tmp_path: Path) -> None:
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(gone.stdout)
    stale = tmp_path / f"llama-key-{dead_pid}-abc123"
    stale.mkdir()
    (stale / "api-key").write_text("old\n")
    mine = tmp_path / f"llama-key-{os.getpid()}-def456"
    mine.mkdir()

    remove_stale_keys(tmp_path)

    assert not stale.exists()
    assert mine.exists()  # a live daemon's key stays

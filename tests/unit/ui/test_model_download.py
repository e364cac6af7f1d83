"""The tray and a managed llama-server that lacks its binary or its model (issue #13).

The real TrayApp, CoreBridge, Core and Engine (with a ``llamacpp-managed`` backend and its
supervisor) on the offscreen platform; the model comes through anyfill's real download
code from the loopback Hub of tests/servers/hfhub.py. The catalogue gets one extra entry,
the tests' tiny FIM GGUF (the real entries are hundreds of MB). With the llama.cpp assets
built, the downloaded model is served by the real llama-server; without them a stand-in
binary shows that the supervisor went on to start it.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton
from pytestqt.qtbot import QtBot

from anyfill.config.model import Settings
from anyfill.daemon.core import Core
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.managed.prestart import start_managed_servers
from anyfill.daemon.managed.runtime import RUNTIME_HINT
from anyfill.daemon.models import catalog
from anyfill.daemon.models.download import ModelDownload, sha256_of
from anyfill.daemon.models.store import part_path
from anyfill.ui.app import TrayApp
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.managed import UNIT
from tests.integration.models.test_download import DATA, HUB_FILE, MODEL
from tests.llm.server import SERVER_BINARY, find_assets
from tests.servers.fixtures import refused_url
from tests.servers.hfhub import HfHub
from tests.servers.http import LoopbackServer

ASSETS = find_assets()
__all__ = ["refused_url"]  # a fixture


async def engine_only(core: Core, stop: asyncio.Event, ready: Callable[[], None]) -> None:
    """The core as `anyfill run` builds it, minus the desktop: the engine with its backends,
    and the managed servers started with the daemon."""
    async with Engine(core.settings, bus=core.bus) as engine:
        core.backends = lambda: engine.backends
        await start_managed_servers(engine.backends, core.settings)
        ready()
        await stop.wait()


@pytest.fixture
def hub() -> Iterator[tuple[HfHub, LoopbackServer, LoopbackServer]]:
    responder = HfHub([HUB_FILE])
    with LoopbackServer.in_thread(responder) as server, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        yield responder, server, cdn


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the server's log
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(catalog, "CATALOG", (*catalog.CATALOG, MODEL))
    return tmp_path


def _binary(home: Path) -> str:
    if ASSETS is not None:
        return str(ASSETS / SERVER_BINARY)
    stand_in = home / "bin" / "llama-server"  # exists, so the model is looked at next
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\nexit 3\n")
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    return str(stand_in)


def _settings(home: Path, binary: str, endpoint: str) -> Settings:
    return Settings.model_validate(
        {
            "backends": [
                {
                    "name": "managed",
                    "type": "llamacpp-managed",
                    "model": MODEL.name,
                    "server": {"binary": binary, "context_size": 1024},
                }
            ],
            "routing": {"default": ["managed"]},
            "models": {"dir": str(home / "models"), "endpoint": endpoint},
        }
    )


def _start(qtbot: QtBot, config: Settings, home: Path) -> TrayApp:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    bridge = CoreBridge(config, runner=engine_only)
    tray = TrayApp(app, config, home / "config.toml", bridge=bridge)
    tray.notifier.enabled = False  # recorded, not sent to a desktop service
    with qtbot.waitSignal(bridge.ready, timeout=10_000):
        tray.start()
    return tray


@pytest.fixture
def stop_later() -> Iterator[list[TrayApp]]:
    started: list[TrayApp] = []
    yield started
    for tray in started:
        for widget in QApplication.topLevelWidgets():
            widget.close()
        assert tray.bridge.stop(10)


def _menu_texts(tray: TrayApp) -> dict[str, object]:
    tray.tray.rebuild_menu()
    return {action.text(): action for action in tray.tray.menu.actions()}


def _download_action(tray: TrayApp) -> object:
    actions = _menu_texts(tray)
    offers = [text for text in actions if text.startswith("Download the FIM model")]
    assert len(offers) == 1, list(actions)
    return actions[offers[0]]


def _server(tray: TrayApp) -> ManagedServerChanged | None:
    return tray.state.servers.get("managed")


def test_a_missing_model_is_shown_and_declining_downloads_nothing(
    qtbot: QtBot,
    home: Path,
    hub: tuple[HfHub, LoopbackServer, LoopbackServer],
    stop_later: list[TrayApp],
) -> None:
    _, server, cdn = hub
    tray = _start(qtbot, _settings(home, _binary(home), server.url), home)
    stop_later.append(tray)
    qtbot.waitUntil(lambda: _server(tray) is not None, timeout=10_000)

    state = _server(tray)
    assert state is not None
    assert state.state == "missing_model"
    assert tray.state.look() == "error"
    tooltip = tray.state.tooltip()
    assert "managed (managed): its model is not downloaded" in tooltip
    assert f"fix: anyfill model pull {MODEL.name}" in tooltip
    said = [text for _, text in tray.notifier.shown if f"anyfill model pull {MODEL.name}" in text]
    assert len(said) == 1
    assert "tray menu" not in said[0]  # offscreen has no tray icon, so no menu to name
    # Without a tray icon the question opens on its own, once.
    qtbot.waitUntil(lambda: tray.downloads.ask_box is not None)
    first_box = tray.downloads.ask_box
    models = home / "models"
    size = f"{len(DATA) / 1e6:.0f} MB"
    shown_folder = f"~/{models.relative_to(home)}"  # $HOME is tmp_path here
    label = f"Download the FIM model {MODEL.name} ({size}, to {shown_folder})…"
    action = _download_action(tray)
    assert action.text() == label  # type: ignore[attr-defined]

    action.trigger()  # type: ignore[attr-defined]
    box = tray.downloads.ask_box
    assert box is first_box  # the open question is raised, not asked twice
    assert box is not None
    assert box.isVisible()
    assert box.text() == f"Download the code completion model {MODEL.name}?"
    assert f"Size: {size}\nFolder: {shown_folder}\n" in box.informativeText()
    box.button(QMessageBox.StandardButton.No).click()

    qtbot.waitUntil(lambda: tray.downloads.ask_box is None)
    qtbot.wait(300)  # time for a download to begin, were one started
    assert tray.downloads.progress is None
    assert tray.downloads.running is None
    assert server.requests == []
    assert cdn.requests == []
    assert not models.exists() or list(models.iterdir()) == []
    # Asked again the same session: a second notification would be noise, the offer stays.
    assert len([t for t in tray.notifier.shown if "model pull" in t[1]]) == 1
    assert _download_action(tray) is not None


def test_accepting_shows_progress_verifies_the_file_and_starts_the_server(
    qtbot: QtBot,
    home: Path,
    hub: tuple[HfHub, LoopbackServer, LoopbackServer],
    stop_later: list[TrayApp],
) -> None:
    responder, server, _ = hub
    responder.chunk_delay_s = 0.002  # a link slow enough to see the bar move
    tray = _start(qtbot, _settings(home, _binary(home), server.url), home)
    stop_later.append(tray)
    qtbot.waitUntil(lambda: _server(tray) is not None, timeout=10_000)
    bars: list[tuple[int, int, str]] = []

    def seen(event: object) -> None:  # after the tray's own handler (connected first)
        dialog = tray.downloads.progress
        if isinstance(event, ModelDownload) and dialog is not None:
            bars.append((dialog.value(), dialog.maximum(), dialog.labelText()))

    tray.bridge.core_event.connect(seen)
    _download_action(tray).trigger()  # type: ignore[attr-defined]
    box = tray.downloads.ask_box
    assert box is not None
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: tray.downloads.progress is not None)
    assert tray.downloads.progress.isVisible()  # type: ignore[union-attr]

    qtbot.waitUntil(lambda: tray.downloads.finished != [], timeout=30_000)

    assert tray.downloads.finished == [(MODEL.name, "done")]
    target = home / "models" / MODEL.filename
    assert target.read_bytes() == DATA
    assert sha256_of(target) == MODEL.sha256
    assert not part_path(target).exists()
    assert tray.downloads.progress is None  # the dialog closed itself
    maximum = len(DATA) // UNIT
    size = f"{len(DATA) / 1e6:.0f} MB"
    assert bars[0][:2] == (0, maximum)
    assert any(0 < value < maximum for value, _, _ in bars)  # it moved before the end
    assert bars[-1][2] == f"Downloading {MODEL.name} to ~/models\n{size} of {size}"
    assert [v for v, _, _ in bars] == sorted(v for v, _, _ in bars)
    assert (
        "anyfill: model downloaded",
        f"{MODEL.filename} is verified; anyfill's llama.cpp server starts with it now.",
    ) in tray.notifier.shown
    # The core picks up the file: the server leaves 'missing_model' without a restart.
    wanted = ("ready",) if ASSETS is not None else ("starting", "restarting", "ready")
    qtbot.waitUntil(lambda: (s := _server(tray)) is not None and s.state in wanted, timeout=60_000)
    if ASSETS is not None:
        state = _server(tray)
        assert state is not None
        assert state.url.startswith("http://127.0.0.1:")
        assert "managed (managed): ready" in tray.state.tooltip()
        assert not any(t.startswith("Download the FIM") for t in _menu_texts(tray))


def test_cancel_closes_the_dialog_keeps_the_partial_file_and_the_next_download_resumes(
    qtbot: QtBot,
    home: Path,
    hub: tuple[HfHub, LoopbackServer, LoopbackServer],
    stop_later: list[TrayApp],
) -> None:
    responder, server, cdn = hub
    responder.chunk_delay_s = 0.01  # ~2 s for the file: room to cancel in the middle
    tray = _start(qtbot, _settings(home, _binary(home), server.url), home)
    stop_later.append(tray)
    qtbot.waitUntil(lambda: _server(tray) is not None, timeout=10_000)
    events: list[ModelDownload] = []
    tray.bridge.core_event.connect(
        lambda e: events.append(e) if isinstance(e, ModelDownload) else None
    )

    _download_action(tray).trigger()  # type: ignore[attr-defined]
    tray.downloads.ask_box.button(QMessageBox.StandardButton.Yes).click()  # type: ignore[union-attr]
    # Cancel once some of it came, while the rest comes in.
    qtbot.waitUntil(lambda: any(0 < e.done < len(DATA) for e in events), timeout=20_000)
    dialog = tray.downloads.progress
    assert dialog is not None
    cancel = dialog.findChild(QPushButton)
    assert cancel is not None
    assert cancel.text() == "Cancel"
    cancel.click()

    assert tray.downloads.progress is None
    assert not dialog.isVisible()
    assert tray.downloads.finished == [(MODEL.name, "cancelled")]
    qtbot.waitUntil(lambda: events[-1].state == "cancelled", timeout=20_000)
    target = home / "models" / MODEL.filename
    kept = part_path(target).stat().st_size
    assert 0 < kept < len(DATA)
    assert events[-1].done == kept
    assert not target.exists()

    responder.chunk_delay_s = 0.0
    _download_action(tray).trigger()  # type: ignore[attr-defined]
    tray.downloads.ask_box.button(QMessageBox.StandardButton.Yes).click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: len(tray.downloads.finished) == 2, timeout=30_000)

    assert tray.downloads.finished[-1] == (MODEL.name, "done")
    assert target.read_bytes() == DATA
    last_get = [r for r in cdn.requests if r.method == "GET"][-1]
    assert last_get.headers["range"] == f"bytes={kept}-"


def test_a_missing_binary_shows_its_fix(
    qtbot: QtBot, home: Path, monkeypatch: pytest.MonkeyPatch, stop_later: list[TrayApp]
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ANYFILL_LLAMA_CACHE", str(home / "no-build"))
    tray = _start(qtbot, _settings(home, "", "http://127.0.0.1:9"), home)
    stop_later.append(tray)
    qtbot.waitUntil(lambda: _server(tray) is not None, timeout=10_000)

    state = _server(tray)
    assert state is not None
    assert state.state == "missing_binary"
    assert tray.state.look() == "error"
    tooltip = tray.state.tooltip()
    assert "managed (managed): llama-server is missing" in tooltip
    assert f"fix: {RUNTIME_HINT}" in tooltip
    assert "pip install 'anyfill[local]'" in tooltip  # the prebuilt runtime first
    assert "scripts/setup --local" in tooltip
    assert "apt install llama.cpp" in tooltip
    notes = [text for _, text in tray.notifier.shown if "llama-server is not installed" in text]
    assert notes == [
        "anyfill cannot start its llama.cpp server: llama-server is not installed, nor "
        f"anyfill's prebuilt runtime. Fix: {RUNTIME_HINT}"
    ]
    actions = _menu_texts(tray)
    assert not any(text.startswith("Download the FIM") for text in actions)
    copy = actions[f"Copy the fix: {RUNTIME_HINT}"]
    copy.trigger()  # type: ignore[attr-defined]
    assert QGuiApplication.clipboard().text() == RUNTIME_HINT


def test_a_failed_download_says_why_and_writes_nothing(
    qtbot: QtBot, home: Path, refused_url: str, stop_later: list[TrayApp]
) -> None:
    tray = _start(qtbot, _settings(home, _binary(home), refused_url), home)
    stop_later.append(tray)
    qtbot.waitUntil(lambda: _server(tray) is not None, timeout=10_000)

    _download_action(tray).trigger()  # type: ignore[attr-defined]
    tray.downloads.ask_box.button(QMessageBox.StandardButton.Yes).click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: tray.downloads.finished != [], timeout=20_000)

    [(model, outcome)] = tray.downloads.finished
    assert model == MODEL.name
    assert outcome.startswith("failed: cannot reach http://127.0.0.1:")
    assert tray.downloads.progress is None
    warnings = [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox) and w.isVisible() and "cannot reach" in w.text()
    ]
    assert len(warnings) == 1
    assert warnings[0].windowTitle() == "anyfill: the download failed"
    models = home / "models"
    assert not models.exists() or list(models.iterdir()) == []
    assert _server(tray).state == "missing_model"  # type: ignore[union-attr]
    assert _download_action(tray) is not None  # the user can try again

"""The tray application on the offscreen platform (no tray host there): menu actions reach
the real Core through the bridge, events redraw the icon, history copies, notifications
are said once, and without a tray the user is told so while the core still runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QApplication, QMenu
from pytestqt.qtbot import QtBot

from anyfill.config.model import Settings
from anyfill.daemon.bus.status import PressFinished, PressStarted, ShowWindow
from anyfill.daemon.core import Core
from anyfill.daemon.errors import HotkeyTaken
from anyfill.daemon.scheduler.events import AttemptFinished, CooldownChanged
from anyfill.ui.app import NO_TRAY, TrayApp
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.notify import problem_of, problem_of_stop


async def switches_only(core: Core, stop: asyncio.Event, ready: Callable[[], None]) -> None:
    ready()
    await stop.wait()


def settings() -> Settings:
    return Settings.model_validate(
        {
            "backends": [
                {"name": "local", "type": "llamacpp", "url": "http://127.0.0.1:9"},
                {"name": "cloud", "type": "ollama", "url": "http://127.0.0.1:8"},
            ],
            "routing": {"default": ["local", "cloud"]},
        }
    )


@pytest.fixture
def tray_app(qtbot: QtBot, tmp_path: Path) -> Iterator[TrayApp]:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    config = settings()
    bridge = CoreBridge(config, runner=switches_only)
    tray = TrayApp(app, config, tmp_path / "config.toml", bridge=bridge)
    tray.notifier.enabled = False  # recorded, not sent to a desktop service
    with qtbot.waitSignal(bridge.ready, timeout=5000):
        tray.start()
    yield tray
    bridge.stop()


def actions(menu: QMenu) -> dict[str, QAction]:
    found = {}
    for action in menu.actions():
        if action.menu() is not None:
            for inner in action.menu().actions():
                found[f"{action.text()}/{inner.text()}"] = inner
        found[action.text()] = action
    return found


def test_without_a_tray_host_the_user_is_told_once_and_the_core_runs(tray_app: TrayApp) -> None:
    assert not tray_app.tray.icon.isVisible()  # offscreen has no system tray
    assert tray_app.bridge.running
    said = [text for _, text in tray_app.notifier.shown]
    assert said == [f"{NO_TRAY.message} {NO_TRAY.fix}"]
    assert "anyfill status" in said[0]


def test_menu_actions_reach_the_core(tray_app: TrayApp, qtbot: QtBot) -> None:
    tray_app.tray.rebuild_menu()
    menu = actions(tray_app.tray.menu)
    assert menu["anyfill: ready"].isEnabled() is False
    menu["Pause"].trigger()
    qtbot.waitUntil(lambda: tray_app.state.paused)
    assert tray_app.bridge.status().result(5).paused
    assert tray_app.state.look() == "paused"

    tray_app.tray.rebuild_menu()
    menu = actions(tray_app.tray.menu)
    assert "Pause" not in menu
    menu["Resume"].trigger()
    qtbot.waitUntil(lambda: not tray_app.state.paused)

    tray_app.tray.rebuild_menu()
    menu = actions(tray_app.tray.menu)
    assert menu["Insert mode/Paste"].isChecked()
    menu["Insert mode/Preview first"].trigger()
    qtbot.waitUntil(lambda: tray_app.state.insert_mode == "preview")
    assert tray_app.bridge.settings.insert.mode == "preview"

    assert menu["First backend/local"].isChecked()
    menu["First backend/cloud"].trigger()
    qtbot.waitUntil(lambda: tray_app.state.chain == ("cloud", "local"))
    tray_app.tray.rebuild_menu()
    assert actions(tray_app.tray.menu)["First backend/cloud"].isChecked()


def test_events_redraw_the_state_and_recent_completions_copy_again(
    tray_app: TrayApp, qtbot: QtBot
) -> None:
    publish = tray_app.bridge.call
    publish(lambda core: core.bus.publish(PressStarted(1, "complete"))).result(5)
    qtbot.waitUntil(lambda: tray_app.state.look() == "working")
    assert "1 in flight" in tray_app.tray.icon.toolTip()
    done = PressFinished(
        press_id=1,
        action="complete",
        status="inserted",
        app="Mousepad",
        middle="big ",
        finished=0.0,
    )
    publish(lambda core: core.bus.publish(done)).result(5)
    qtbot.waitUntil(lambda: tray_app.state.look() == "idle")
    tray_app.tray.rebuild_menu()
    menu = actions(tray_app.tray.menu)
    entry = next(a for name, a in menu.items() if name.startswith("Recent completions/"))
    assert "Mousepad — big" in entry.text()
    entry.trigger()
    assert QGuiApplication.clipboard().text() == "big "


def test_problems_are_notified_once_with_their_fix(tray_app: TrayApp, qtbot: QtBot) -> None:
    refused = AttemptFinished("r1", "cloud", "auth", reason="401")
    down = AttemptFinished("r2", "local", "unavailable", reason="connection refused")
    for event in (refused, refused, down, down):
        tray_app.bridge.call(lambda core, e=event: core.bus.publish(e)).result(5)
    qtbot.waitUntil(lambda: len(tray_app.notifier.shown) >= 3)
    texts = [text for _, text in tray_app.notifier.shown[1:]]  # [0] is "no tray"
    assert texts == [
        "Backend 'cloud' refused the API key. Store a valid key: anyfill config set-key cloud",
        "Nothing answers for backend 'local' at http://127.0.0.1:9. "
        "Start the server, or fix backends.url in the settings.",
    ]


def test_a_second_run_asking_for_settings_opens_the_settings_panel(
    tray_app: TrayApp, qtbot: QtBot
) -> None:
    from anyfill.ui.settings.window import SettingsWindow

    tray_app.bridge.call(lambda core: core.bus.publish(ShowWindow("settings"))).result(5)
    qtbot.waitUntil(lambda: bool(tray_app.windows.opened))
    panels = [w for w in QApplication.topLevelWidgets() if isinstance(w, SettingsWindow)]
    assert [w.isVisible() for w in panels] == [True]
    assert "[[backends]]" in tray_app.windows.config_path.read_text()  # written, commented
    tray_app.windows.show_settings()  # the same window again, raised
    assert len([w for w in QApplication.topLevelWidgets() if isinstance(w, SettingsWindow)]) == 1
    panels[0].close()


def test_the_config_file_item_hands_the_file_to_the_desktop(tray_app: TrayApp) -> None:
    tray_app.tray.rebuild_menu()
    actions(tray_app.tray.menu)["Edit the config file"].trigger()
    assert tray_app.windows.opened == [f"file://{tray_app.windows.config_path}"]


def test_the_core_commands_the_control_socket_shows(tray_app: TrayApp) -> None:
    from anyfill.daemon.control.builtins import install_builtins
    from anyfill.daemon.control.commands import Commands

    commands = Commands()
    tray_app.bridge.call(lambda core: install_builtins(commands, core)).result(5)
    assert commands.ui == "tray"
    assert {"show-settings", "show-diagnostics", "pause", "resume"} <= set(commands.summaries())


def test_why_the_core_stopped_becomes_a_problem_with_a_fix() -> None:
    error = HotkeyTaken("<ctrl>+<alt>+<space>", "complete")
    taken = problem_of_stop(str(error), error)
    assert (taken.kind, taken.fix) == ("hotkey_taken", "Choose another combination in [hotkeys].")
    assert problem_of_stop("no X display: DISPLAY is not set").kind == "no_display"
    assert problem_of(AttemptFinished("r", "x", "ok"), {}) is None


def test_diagnostics_list_the_doctors_findings_and_fail_the_backend_nothing_answers(
    tray_app: TrayApp, qtbot: QtBot
) -> None:
    tray_app.windows.show_diagnostics()
    window = tray_app.windows._diagnostics
    assert window is not None
    qtbot.waitUntil(lambda: bool(window.findings), timeout=15000)
    topics = [finding.topic for finding in window.findings]
    assert any("local" in topic for topic in topics)
    local = next(f for f in window.findings if "local" in f.topic)
    assert local.status == "fail"
    window.close()


def _tray_with(qtbot: QtBot, tmp_path: Path, config: Settings) -> TrayApp:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    bridge = CoreBridge(config, runner=switches_only)
    tray = TrayApp(app, config, tmp_path / "config.toml", bridge=bridge)
    tray.notifier.enabled = False
    with qtbot.waitSignal(bridge.ready, timeout=5000):
        tray.start()
    return tray


def _first_completion_without_own_servers(tray: TrayApp, qtbot: QtBot) -> None:
    """What the scheduler publishes when llama.cpp :8080 and Ollama :11434 do not run and
    the managed server answers: each absent one cools down and fails over."""
    events: list[object] = []
    for name, url in (("llamacpp", "8080"), ("ollama", "11434")):
        reason = f"backend '{name}': nothing listens on http://127.0.0.1:{url}"
        events += [
            CooldownChanged(name, True, 1.0, reason),
            AttemptFinished("r1", name, "unavailable", reason=reason),
        ]
    events += [
        AttemptFinished("r1", "managed", "ok", total_ms=30.0),
        PressFinished(press_id=1, action="complete", status="inserted", app="Mousepad", middle="x"),
    ]
    for event in events:
        tray.bridge.call(lambda core, e=event: core.bus.publish(e)).result(5)
    qtbot.waitUntil(lambda: "llamacpp" in tray.state.cooling and "ollama" in tray.state.cooling)


def test_default_servers_the_user_never_set_up_are_skipped_quietly(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """Issue #25: no "fix needed" for them, and the header does not say llamacpp cools."""
    tray = _tray_with(qtbot, tmp_path, Settings())
    try:
        _first_completion_without_own_servers(tray, qtbot)
        qtbot.waitUntil(lambda: tray.state.absent == {"llamacpp", "ollama"})
        assert [title for title, _ in tray.notifier.shown] == ["anyfill: fix needed"]  # no tray
        assert tray.notifier.shown[0][1] == f"{NO_TRAY.message} {NO_TRAY.fix}"
        assert tray.state.look() == "idle"
        tooltip = tray.state.tooltip()
        assert tooltip.startswith("anyfill: ready\n")
        assert "backends: llamacpp (not running) → ollama (not running) → managed" in tooltip
        tray.tray.rebuild_menu()
        assert "anyfill: ready" in actions(tray.tray.menu)
    finally:
        tray.bridge.stop()


def test_a_local_server_the_user_set_up_is_still_reported(qtbot: QtBot, tmp_path: Path) -> None:
    changed = Settings.model_validate(
        {
            "backends": [
                {"name": "llamacpp", "type": "llamacpp", "url": "http://127.0.0.1:8081"},
                *[b.model_dump() for b in Settings().backends[1:]],
            ]
        }
    )
    tray = _tray_with(qtbot, tmp_path, changed)
    try:
        _first_completion_without_own_servers(tray, qtbot)
        qtbot.waitUntil(lambda: len(tray.notifier.shown) >= 2)
        texts = [text for _, text in tray.notifier.shown[1:]]
        assert texts == [
            "Nothing answers for backend 'llamacpp' at http://127.0.0.1:8081. "
            "Start the server, or fix backends.url in the settings."
        ]
        assert tray.state.look() == "cooling"  # the first backend the user chose cools
    finally:
        tray.bridge.stop()


async def serving_the_control_socket(
    core: Core, stop: asyncio.Event, ready: Callable[[], None]
) -> None:
    """The real control socket served by the core loop, as `anyfill run` serves it."""
    from anyfill.daemon.control.builtins import install_builtins
    from anyfill.daemon.control.commands import Commands
    from anyfill.daemon.control.server import ControlServer

    commands = Commands()
    install_builtins(commands, core)
    async with ControlServer(commands) as control:
        await control.start_serving()
        ready()
        await stop.wait()


def test_diagnostics_see_the_running_daemon_answer_its_control_socket(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The doctor pings the control socket the core loop serves: run on that loop it blocked
    the answer and always read 'did not answer within 2 s' (also after Check again)."""
    import tempfile

    runtime = Path(tempfile.mkdtemp(prefix="afd-"))
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    bridge = CoreBridge(settings(), runner=serving_the_control_socket)
    tray = TrayApp(app, settings(), tmp_path / "config.toml", bridge=bridge)
    tray.notifier.enabled = False
    with qtbot.waitSignal(bridge.ready, timeout=5000):
        tray.start()
    try:
        tray.windows.show_diagnostics()
        window = tray.windows._diagnostics
        assert window is not None
        for _ in range(2):  # the first run, then Check again
            qtbot.waitUntil(lambda: bool(window.findings), timeout=15000)
            daemon = next(f for f in window.findings if f.topic == "daemon")
            assert daemon.status == "ok", daemon.detail
            assert daemon.detail.startswith("running (pid "), daemon.detail
            window.findings = []
            window.run_checks()
        window.close()
    finally:
        bridge.stop()


def test_diagnostics_fit_the_screen_scroll_and_end_in_a_verdict(
    tray_app: TrayApp, qtbot: QtBot
) -> None:
    from anyfill.ui.diagnostics import fitted

    tray_app.windows.show_diagnostics()
    window = tray_app.windows._diagnostics
    assert window is not None
    qtbot.waitUntil(lambda: bool(window.findings), timeout=15000)
    # 'local' and 'cloud' answer nowhere: the doctor's own verdict, in words
    assert "cannot work until the 'fail' lines are fixed" in window.verdict.text()
    assert "above" not in window.verdict.text()
    screen = window.screen().availableGeometry()
    assert screen.contains(window.geometry()), (window.geometry(), screen)
    assert window.scroll_area.widgetResizable()
    # a small screen: the window shrinks into it, the findings scroll
    tiny = QRect(0, 0, 640, 360)
    small = fitted(tiny)
    assert tiny.contains(small)
    window.setGeometry(small)
    window.show()
    qtbot.waitUntil(lambda: window.scroll_area.verticalScrollBar().maximum() > 0, timeout=5000)
    window.close()

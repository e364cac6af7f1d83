"""The bridge: the core runs on its own loop thread; events arrive on the GUI thread;
commands and coroutines run on the core thread and their results come back to the GUI."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from anyfill.config.model import Settings
from anyfill.daemon.bus.status import DaemonStatus, PressStarted
from anyfill.daemon.core import Core
from anyfill.daemon.errors import ConfigError
from anyfill.ui.bridge import CoreBridge


def backends_settings() -> Settings:
    return Settings.model_validate(
        {
            "backends": [
                {"name": "local", "type": "llamacpp", "url": "http://127.0.0.1:9"},
                {"name": "other", "type": "ollama", "url": "http://127.0.0.1:9"},
            ],
            "routing": {"default": ["local", "other"]},
        }
    )


async def switches_only(core: Core, stop: asyncio.Event, ready: Callable[[], None]) -> None:
    """The real Core without a desktop: the switches work, nothing grabs hotkeys."""
    ready()
    await stop.wait()


@pytest.fixture
def bridge(qtbot: QtBot) -> CoreBridge:
    bridge = CoreBridge(backends_settings(), runner=switches_only)
    with qtbot.waitSignal(bridge.ready, timeout=5000) as ready:
        bridge.start()
    assert isinstance(ready.args[0], DaemonStatus)
    yield bridge
    with qtbot.waitSignal(bridge.stopped, timeout=5000) as stopped:
        assert bridge.stop()
    assert stopped.args == [""]


def test_ready_carries_the_status_and_the_core_runs_on_another_thread(
    bridge: CoreBridge, qtbot: QtBot
) -> None:
    async def which_thread() -> int:
        return threading.get_ident()

    assert bridge.submit(which_thread()).result(5) != threading.get_ident()
    assert bridge.running


def test_commands_change_the_core_and_events_reach_the_gui_thread(
    bridge: CoreBridge, qtbot: QtBot
) -> None:
    seen: list[tuple[object, int]] = []
    bridge.core_event.connect(lambda event: seen.append((event, threading.get_ident())))
    status = bridge.pause().result(5)
    assert status.paused
    qtbot.waitUntil(lambda: any(isinstance(e, DaemonStatus) and e.paused for e, _ in seen))
    assert all(thread == threading.get_ident() for _, thread in seen)

    assert not bridge.resume().result(5).paused
    assert bridge.set_insert_mode("preview").result(5).insert_mode == "preview"
    assert bridge.set_first_backend("other").result(5).chain == ("other", "local")
    assert bridge.settings.routing.default == ["other", "local"]


def test_a_bad_command_fails_its_future_and_then_reports_on_the_gui_thread(
    bridge: CoreBridge, qtbot: QtBot
) -> None:
    errors: list[tuple[BaseException, int]] = []
    future = bridge.set_first_backend("nosuch")
    bridge.then(future, lambda _: None, lambda exc: errors.append((exc, threading.get_ident())))
    qtbot.waitUntil(lambda: bool(errors))
    assert isinstance(errors[0][0], ConfigError)
    assert errors[0][1] == threading.get_ident()
    with pytest.raises(ConfigError):
        bridge.set_insert_mode("shout").result(5)


def test_a_coroutine_result_comes_back_on_the_gui_thread(bridge: CoreBridge, qtbot: QtBot) -> None:
    async def publish_and_answer() -> str:
        await asyncio.sleep(0.01)
        return "pong"

    results: list[tuple[str, int]] = []
    bridge.then(
        bridge.submit(publish_and_answer()),
        lambda value: results.append((value, threading.get_ident())),
    )
    qtbot.waitUntil(lambda: bool(results))
    assert results == [("pong", threading.get_ident())]


def test_bus_events_published_on_the_core_arrive_in_order(bridge: CoreBridge, qtbot: QtBot) -> None:
    seen: list[int] = []
    bridge.core_event.connect(
        lambda e: seen.append(e.press_id) if isinstance(e, PressStarted) else None
    )

    def burst(core: Core) -> None:
        for n in range(200):
            core.bus.publish(PressStarted(n, "complete"))

    bridge.call(burst).result(5)
    qtbot.waitUntil(lambda: len(seen) == 200)
    assert seen == list(range(200))


def test_a_core_that_fails_to_start_says_why(qtbot: QtBot) -> None:
    async def no_display(core: Core, stop: asyncio.Event, ready: Callable[[], None]) -> None:
        raise ConfigError("hotkey <ctrl>+<alt>+<space> is taken by another program")

    bridge = CoreBridge(Settings(), runner=no_display)
    with qtbot.waitSignal(bridge.stopped, timeout=5000) as stopped:
        bridge.start()
    assert "taken by another program" in stopped.args[0]
    assert not bridge.running
    with pytest.raises(RuntimeError, match="not running"):
        bridge.pause().result(1)


def test_the_qt_binding_keeps_reference_counts_of_what_emit_returns(qtbot: QtBot) -> None:
    """PySide6 6.12.0 under CPython 3.11 lost a reference to True on every emit (and to
    None on every void call): the tray crashed after a few hundred events. pyproject
    excludes it; this catches a binding with the same defect."""
    bridge = CoreBridge(Settings(), runner=switches_only)
    seen: list[object] = []
    bridge.core_event.connect(seen.append)
    trues, nones = sys.getrefcount(True), sys.getrefcount(None)
    for n in range(300):
        bridge.core_event.emit(n)
        bridge.setObjectName("bridge")
    assert len(seen) == 300
    assert sys.getrefcount(True) >= trues - 10
    assert sys.getrefcount(None) >= nones - 10


def test_qt_garbage_is_never_freed_on_the_core_thread(bridge: CoreBridge, qtbot: QtBot) -> None:
    """A Qt object in a reference cycle (a tray, a dialog) is garbage for the cyclic
    collector, which used to run in whichever thread allocated: the core's thread, or a
    download's worker thread, deleting the widget under the GUI thread's feet (the test
    suite's SIGABRT in the download dialog's cancel test). While the core runs, the
    collector runs on the GUI thread only."""
    from PySide6.QtCore import QTimer

    freed_on: list[str] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self
            self.timer = QTimer()
            self.timer.start(60_000)  # a running timer: Qt warns when stopped elsewhere
            self.timer.destroyed.connect(
                lambda: freed_on.append(threading.current_thread().name),
                Qt.ConnectionType.DirectConnection,
            )

    Cycle()  # garbage at once, for the cyclic collector only

    async def allocate_a_lot() -> None:
        # Far beyond every generation's threshold: automatic collections would run here.
        for _ in range(20):
            junk = [[object()] for _ in range(50_000)]
            for item in junk:
                item.append(item)
            del junk

    bridge.submit(allocate_a_lot()).result(30)
    assert freed_on in ([], ["MainThread"])
    qtbot.waitUntil(lambda: freed_on == ["MainThread"], timeout=5000)

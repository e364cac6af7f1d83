"""The settings in force are read, not copied (issue 20): a reload reaches every part of
the desktop path at once, and what the capture strategies learned survives it."""

from __future__ import annotations

import contextlib

import pytest

from anyfill.config.model import Settings
from anyfill.daemon.app import _desktop_path, apply_settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.core import Core
from anyfill.daemon.desktop.capture.keyboard import KeyboardCapture
from anyfill.daemon.engine.swappable import SwappableCompleter
from anyfill.daemon.settings.live import LiveSettings, changed_sections
from tests.unit.desktop.fakes import FakeCompleter, fake_desktop
from tests.unit.desktop.test_pipeline import EDITOR


def quiet_settings() -> Settings:
    settings = Settings()
    settings.logging.file = False  # configure_logging must not write a log file here
    return settings


class _Factory:
    def __init__(self) -> None:
        self.built = 0

    def __call__(
        self, settings: Settings, bus: EventBus, leases: object
    ) -> contextlib.AbstractAsyncContextManager[FakeCompleter]:
        self.built += 1
        return contextlib.nullcontext(FakeCompleter())


async def test_a_log_level_change_keeps_the_learned_capture_wait() -> None:
    core = Core(quiet_settings(), EventBus())
    desktop, *_ = fake_desktop(EDITOR)
    factory = _Factory()
    async with SwappableCompleter(factory, core.bus) as completer:
        await completer.start(core.settings)
        pipeline = _desktop_path(core, desktop, completer, preview=False)
        keyboard = pipeline._strategies["keyboard"]
        assert isinstance(keyboard, KeyboardCapture)
        configured = core.settings.capture.empty_timeout_ms / 1000
        keyboard.timings.note_reaction(EDITOR.app, 0.5)  # the app was slow on a press
        learned = keyboard.timings.empty_wait(EDITOR.app, configured, 10.0)
        assert learned == pytest.approx(1.5)

        old = core.settings
        new = old.model_copy(deep=True)
        new.logging.level = "DEBUG"
        new.capture.empty_timeout_ms = 2000
        notes = await apply_settings(
            core=core, desktop=desktop, completer=completer, old=old, new=new
        )

        assert notes == []
        assert pipeline._strategies["keyboard"] is keyboard  # not rebuilt
        after = keyboard.timings.empty_wait(EDITOR.app, configured, 10.0)
        assert after == learned  # what was learned is still there
        # ... and the strategy reads the new setting in force, with no copy handed to it.
        assert keyboard._config.empty_timeout_ms == 2000
        assert pipeline.settings is new
        assert factory.built == 1  # a log change builds no new engine


def test_listeners_hear_only_the_sections_they_care_about() -> None:
    live = LiveSettings(Settings())
    heard: list[frozenset[str]] = []
    live.subscribe(lambda old, new, changed: heard.append(changed), sections=["mqtt"])
    new = live.current.model_copy(deep=True)
    new.logging.level = "DEBUG"
    assert live.replace(new) == {"logging"}
    assert heard == []
    newer = new.model_copy(deep=True)
    newer.mqtt.allow_remote_insert = True
    assert live.replace(newer) == {"mqtt"}
    assert heard == [frozenset({"mqtt"})]
    assert live.section("mqtt")().allow_remote_insert is True
    with pytest.raises(KeyError):
        live.section("nope")


def test_a_failing_listener_does_not_keep_the_others_stale() -> None:
    live = LiveSettings(Settings())
    heard: list[str] = []

    def broken(old: Settings, new: Settings, changed: frozenset[str]) -> None:
        raise RuntimeError("a bug")

    live.subscribe(broken)
    live.subscribe(lambda old, new, changed: heard.append(new.logging.level))
    new = live.current.model_copy(deep=True)
    new.logging.level = "ERROR"
    live.replace(new)
    assert heard == ["ERROR"]
    assert live.current is new
    assert changed_sections(new, new) == frozenset()

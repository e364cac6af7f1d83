"""The pipeline's decisions with the desktop ports and the completer faked at their edge:
rules, the focus and selection guards, supersede, cancel, clipboard mode."""

from __future__ import annotations

import asyncio

import pytest

from anyfill.config.model import CaptureConfig, CaptureStrategy, Settings
from anyfill.daemon.desktop import pipeline as pipeline_module
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured, Strategy, trimmed
from anyfill.daemon.desktop.capture.clipboard_mode import ClipboardCapture
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.desktop.ports import ClipSnapshot, Target
from anyfill.daemon.errors import CaptureError, SecureField
from tests.unit.desktop.fakes import (
    FakeClipboard,
    FakeCompleter,
    FakeKeys,
    FakeWindows,
    fake_desktop,
)

EDITOR = Target(window_id=0x100, app="Mousepad", instance="mousepad", process="mousepad")


class FixedCapture:
    """A capture strategy answering fixed text (or failing), counting its calls."""

    def __init__(
        self,
        name: CaptureStrategy,
        prefix: str = "Hello ",
        suffix: str = "world",
        error: CaptureError | None = None,
    ) -> None:
        self.name = name
        self.prefix, self.suffix, self.error = prefix, suffix, error
        self.calls = 0

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        self.calls += 1
        if self.error is not None:
            raise self.error
        limits = CaptureConfig(max_prefix_chars=4000, max_suffix_chars=1000)
        return trimmed(self.prefix, self.suffix, target, self.name, limits)


class ReadingCapture(FixedCapture):
    """Also reads the text before the caret back: the fixed prefix plus what the fake app
    received since (``lands=False``: a paste that never reaches the document)."""

    keys: FakeKeys | None = None
    lands = True
    dropped = 0
    """How many of the first pastes the fake app drops (reads, inserts nothing)."""

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        assert self.keys is not None
        kept = (self.keys.pasted + self.keys.typed)[self.dropped :]
        return self.prefix + ("".join(kept) if self.lands else "")


class ReadingAroundCapture(ReadingCapture):
    """Reads both sides back; ``eaten`` characters after the caret vanished with the paste."""

    eaten = 0

    async def read_back_around(self, target: Target, app: AppSettings) -> tuple[str, str] | None:
        before = await self.read_back(target, app)
        assert before is not None
        return before, self.suffix[self.eaten :]


def build(
    target: Target = EDITOR, completer: FakeCompleter | None = None, **strategies: Strategy
) -> tuple[Pipeline, FakeCompleter, FakeKeys, FakeClipboard, FakeWindows]:
    desktop, keys, clipboard, windows = fake_desktop(target)
    completer = completer or FakeCompleter()
    reading = ReadingCapture("keyboard")
    reading.keys = keys
    chain: dict[CaptureStrategy, Strategy] = {"keyboard": reading}
    chain.update(strategies)  # type: ignore[arg-type]
    return Pipeline(desktop, completer, Settings(), chain), completer, keys, clipboard, windows


async def run(pipeline: Pipeline, action: str = "complete") -> None:
    pipeline.trigger(action)  # type: ignore[arg-type]
    task = pipeline._current
    assert task is not None
    await asyncio.wait([task])


async def test_inserts_by_paste_and_restores_the_clipboard() -> None:
    pipeline, completer, keys, clipboard, _ = build()
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.method, outcome.middle) == ("inserted", "paste", "big ")
    assert keys.pasted == ["big "]
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert completer.requests[0].context.prefix == "Hello "


async def test_disabled_app_is_neither_read_nor_completed() -> None:
    keyboard = FixedCapture("keyboard")
    pipeline, completer, keys, _, _ = build(Target(window_id=7, app="KeePassXC"), keyboard=keyboard)
    await run(pipeline)
    assert pipeline.history[-1].status == "skipped"
    assert (keyboard.calls, completer.requests, keys.pressed) == (0, [], [])


async def test_focus_moved_while_waiting_keeps_the_completion_and_inserts_nothing() -> None:
    other = Target(window_id=0x200, app="Chromium")
    completer = FakeCompleter(middle="kept text")
    pipeline, _, keys, _, windows = build(completer=completer)
    completer.on_request = lambda _: setattr(windows, "target", other)
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert outcome.status == "kept"
    assert outcome.middle == "kept text"
    assert "0x100" in outcome.reason
    assert "0x200" in outcome.reason
    assert keys.pressed == []


async def test_a_selection_made_while_waiting_blocks_the_paste() -> None:
    completer = FakeCompleter()
    pipeline, _, keys, clipboard, _ = build(completer=completer)
    completer.on_request = lambda _: setattr(clipboard, "app_owns_primary", True)
    await run(pipeline)
    assert pipeline.history[-1].status == "failed"
    assert "selected" in pipeline.history[-1].reason
    assert keys.pasted == []


async def test_newer_press_supersedes_and_cancel_stops() -> None:
    gate = asyncio.Event()
    completer = FakeCompleter(gate=gate)
    pipeline, _, keys, _, _ = build(completer=completer)
    pipeline.trigger("complete")
    await asyncio.sleep(0.01)
    pipeline.trigger("complete")  # supersedes the first
    await asyncio.sleep(0.01)
    pipeline.trigger("cancel")  # stops the second
    await pipeline.aclose()
    assert [o.status for o in pipeline.history] == ["cancelled", "cancelled"]
    assert completer.cancelled == [r.id for r in completer.requests]
    assert len(completer.cancelled) == 2
    assert keys.pasted == []


async def test_password_field_stops_the_chain() -> None:
    keyboard = FixedCapture("keyboard")
    secure = FixedCapture("accessibility", error=SecureField("password field"))
    pipeline, completer, _, _, _ = build(accessibility=secure, keyboard=keyboard)
    pipeline.settings.capture.strategies = ["accessibility", "keyboard"]
    await run(pipeline)
    assert pipeline.history[-1].status == "skipped"
    assert (keyboard.calls, completer.requests) == (0, [])


async def test_failed_strategies_fall_through_and_are_all_named() -> None:
    broken = FixedCapture("accessibility", error=CaptureError("no AT-SPI here"))
    pipeline, completer, _, _, _ = build(accessibility=broken)
    pipeline._settings.capture.strategies = ["accessibility", "keyboard"]
    await run(pipeline)
    assert pipeline.history[-1].status == "inserted"
    assert completer.requests[0].context.method == "keyboard"

    pipeline._settings.capture.strategies = ["accessibility", "clipboard"]
    await run(pipeline)
    reason = pipeline.history[-1].reason
    assert "accessibility: no AT-SPI here" in reason
    assert "clipboard: not available here" in reason


async def test_clipboard_mode_puts_the_completed_text_on_the_clipboard() -> None:
    terminal = Target(window_id=9, app="XTerm", instance="xterm")
    clip = FixedCapture("clipboard", prefix="ls -", suffix=" /tmp")
    pipeline, _, keys, clipboard, _ = build(terminal, FakeCompleter(middle="la"), clipboard=clip)
    await run(pipeline)
    assert pipeline.history[-1].status == "clipboard"
    assert clipboard.data["clipboard"].text() == "ls -la /tmp"
    assert keys.pressed == []


async def test_an_insertion_that_cannot_be_read_back_is_sent_and_kept() -> None:
    pipeline, _, keys, _, _ = build(keyboard=FixedCapture("keyboard"))
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.middle) == ("sent", "big ")
    assert "not checked" in outcome.reason
    assert keys.pasted == ["big "]


async def test_a_paste_that_did_not_land_is_a_failure_with_the_completion_kept() -> None:
    pipeline, _, keys, _, _ = build()
    strategy = pipeline._strategies["keyboard"]
    assert isinstance(strategy, ReadingCapture)
    strategy.lands = False
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.middle) == ("failed", "big ")
    assert "did not land" in outcome.reason
    assert keys.pasted == ["big ", "big "]  # sent once more, then given up


async def test_a_dropped_paste_with_the_text_unchanged_is_sent_once_more() -> None:
    pipeline, _, keys, clipboard, _ = build()
    strategy = pipeline._strategies["keyboard"]
    assert isinstance(strategy, ReadingCapture)
    strategy.dropped = 1
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.middle) == ("inserted", "big ")
    assert keys.pasted == ["big ", "big "]
    assert clipboard.data["clipboard"].text() == "user clipboard"


async def test_insert_verify_off_reports_sent() -> None:
    pipeline, _, _, _, _ = build()
    pipeline._settings.insert.verify = False
    await run(pipeline)
    assert pipeline.history[-1].status == "sent"


async def test_clipboard_mode_answers_in_the_selection_the_text_came_from() -> None:
    terminal = Target(window_id=9, app="XTerm", instance="xterm")
    pipeline, _, _, clipboard, _ = build(terminal, FakeCompleter(middle="la"))
    clipboard.data["primary"] = ClipSnapshot.from_text("ls -<|cursor|> /tmp")
    pipeline._strategies = {"clipboard": ClipboardCapture(pipeline._desktop, CaptureConfig())}
    pipeline._settings.capture.strategies = ["clipboard"]
    await run(pipeline)
    assert pipeline.history[-1].status == "clipboard"
    assert clipboard.data["primary"].text() == "ls -la /tmp"
    assert clipboard.data["clipboard"].text() == "user clipboard"


async def test_a_paste_that_ate_text_after_the_caret_is_a_failure() -> None:
    reading = ReadingAroundCapture("keyboard", prefix="Hello ", suffix="world")
    pipeline, _, keys, _, _ = build(keyboard=reading)
    reading.keys = keys
    reading.eaten = 1
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.middle) == ("failed", "big ")
    assert "after the caret" in outcome.reason
    assert keys.pasted == ["big "]  # never pasted again over a changed document


async def test_a_paste_read_back_on_both_sides_intact_is_inserted() -> None:
    reading = ReadingAroundCapture("keyboard", prefix="Hello ", suffix="world")
    pipeline, _, keys, _, _ = build(keyboard=reading)
    reading.keys = keys
    await run(pipeline)
    assert pipeline.history[-1].status == "inserted"


class SlowTypingCapture(ReadingCapture):
    """An app that reads typed keys from its queue a few at a time: each read-back shows
    ``per_read`` more of the typed characters than the one before."""

    per_read = 2
    reads = 0

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        assert self.keys is not None
        self.reads += 1
        typed = "".join(self.keys.typed)
        return self.prefix + typed[: self.per_read * (self.reads - 1)]


async def test_typed_keys_the_app_takes_slowly_are_waited_for_and_typed_once() -> None:
    slow = SlowTypingCapture("keyboard")
    pipeline, _, keys, _, _ = build(completer=FakeCompleter(middle="typed "), keyboard=slow)
    slow.keys = keys
    pipeline._settings.insert.mode = "type"
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.method) == ("inserted", "type"), outcome
    assert keys.typed == ["typed "]  # never typed a second time while the app caught up
    assert slow.reads == 4  # "", "ty", "type", "typed "


async def test_typed_keys_that_never_show_are_a_failure_typed_only_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipeline_module, "TYPED_SETTLE_S", 0.2)
    slow = SlowTypingCapture("keyboard")
    slow.per_read = 0
    pipeline, _, keys, _, _ = build(completer=FakeCompleter(middle="typed "), keyboard=slow)
    slow.keys = keys
    pipeline._settings.insert.mode = "type"
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.middle) == ("failed", "typed ")
    assert "did not land" in outcome.reason
    assert keys.typed == ["typed "]


class ReadsSomethingElse(ReadingCapture):
    """The app shows other text than the completion before the caret (it pasted the
    user's clipboard instead, say)."""

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        return self.prefix + "user clipboard"


async def test_an_empty_field_that_shows_other_text_is_not_pasted_into_again() -> None:
    """Every text ends with an empty prefix: a read-back that showed the user's clipboard
    pasted into an empty field was taken for "nothing changed", and the completion was
    pasted after it (Chromium, a fresh daemon's first press)."""
    reading = ReadsSomethingElse("keyboard", prefix="", suffix="")
    pipeline, _, keys, _, _ = build(keyboard=reading)
    reading.keys = keys
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert (outcome.status, outcome.middle) == ("failed", "big ")
    assert "not what the insertion should have made" in outcome.reason
    assert keys.pasted == ["big "]


async def test_an_empty_field_left_empty_is_pasted_into_once_more() -> None:
    pipeline, _, keys, _, _ = build(keyboard=ReadingCapture("keyboard", prefix="", suffix=""))
    reading = pipeline._strategies["keyboard"]
    assert isinstance(reading, ReadingCapture)
    reading.keys = keys
    reading.dropped = 1
    await run(pipeline)
    assert pipeline.history[-1].status == "inserted"
    assert keys.pasted == ["big ", "big "]


async def test_a_paste_whose_app_read_the_restored_clipboard_is_never_sent_again() -> None:
    """The app read the user's restored clipboard after the paste: what it inserted is
    unsure, so a read-back that looks unchanged does not bring a second paste."""
    pipeline, _, keys, clipboard, _ = build()
    reading = pipeline._strategies["keyboard"]
    assert isinstance(reading, ReadingCapture)
    reading.lands = False

    def read_now_and_again_late() -> None:
        offer = clipboard.current_offer("clipboard")
        assert offer is not None
        offer.note_request()
        offer.note_fetch()
        keys.pasted.append(offer.snapshot.text() or "")

        def read_again() -> None:
            restored = clipboard.current_offer("clipboard")
            if restored is not None:
                restored.note_request()
                restored.note_fetch()

        asyncio.get_running_loop().call_later(0.07, read_again)

    keys.on_paste = read_now_and_again_late
    await run(pipeline)
    outcome = pipeline.history[-1]
    assert outcome.status == "failed", outcome
    assert "may have pasted your clipboard" in outcome.reason
    assert keys.pasted == ["big "]

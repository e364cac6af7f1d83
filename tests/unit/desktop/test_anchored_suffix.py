"""Issue 21: the end of a document without the late-claim watch. When the prefix ends in
a plain character, the suffix is copied from one character before the caret, so its
selection is never empty and no side is taken as empty. The fake editor is the one of
the races (claims late, keys at once); the capture, late claims and pipeline are ours."""

from __future__ import annotations

import pytest

from anyfill.config.model import CaptureStrategy, Settings
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Strategy
from anyfill.daemon.desktop.capture.keyboard import (
    EMPTY_SIDE_SETTLE_S,
    KeyboardCapture,
    anchor_of,
)
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.desktop.ports import ClipSnapshot
from tests.unit.desktop.fakes import FakeCompleter, fake_desktop
from tests.unit.desktop.test_races import CHROMIUM, SlowEditor

APP = AppSettings(False, "paste", ("keyboard",), "<ctrl>+v", "<ctrl>+c", (), "")


@pytest.mark.parametrize(
    ("prefix", "anchor"),
    [
        ("Hello ", " "),
        ("x = f(a", "a"),
        ("print(1)", ")"),
        ("你好", "好"),
        ("Привет", "т"),
        ("", ""),
        ("line\n", ""),  # rich text copies a block break as one or two newlines
        ("crlf\r", ""),
        ("Hi 👋", ""),  # a symbol: an emoji may take a modifier or a joiner
        ("thumb 👍🏽", ""),  # a skin tone modifier (Sk)
        ("cafe\u0301", ""),  # a combining accent
        ("क्ष", ""),  # after a virama: one conjunct
        ("a\u200db", ""),  # after a zero-width joiner
        ("\u1100", ""),  # a Hangul jamo
    ],
)
def test_the_anchor_is_a_character_one_left_moves_over_alone(prefix: str, anchor: str) -> None:
    assert anchor_of(prefix) == anchor


async def test_the_end_of_a_document_is_copied_with_the_anchor_and_needs_no_long_watch() -> None:
    desktop, keys, clipboard, _ = fake_desktop(CHROMIUM)
    clipboard.data["primary"] = ClipSnapshot.from_text("user selection")
    editor = SlowEditor(clipboard, keys, "Hello ", 6)
    keyboard = KeyboardCapture(desktop, Settings().capture)

    captured = await keyboard.capture(CHROMIUM, APP)

    assert (captured.whole_prefix, captured.whole_suffix) == ("Hello ", "")
    assert keys.pressed[keys.pressed.index("<ctrl>+<shift>+<end>") - 1] == "<left>"
    assert (editor.caret, editor.selection) == (6, None)  # Left, then Right: back
    assert captured.late is not None
    # No side was taken as empty: the watch is the one of a mid-line press.
    assert captured.late.collapse is None
    assert captured.late.seconds < EMPTY_SIDE_SETTLE_S
    assert not await captured.late.settled()
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert clipboard.data["primary"].text() == "user selection"


async def test_a_slow_anchored_suffix_is_waited_for_not_taken_as_empty() -> None:
    """The suffix's selection comes 300 ms after the keys (a plain side would have been
    taken as empty after its learned 20 ms and failed the press): it is waited for."""
    desktop, keys, clipboard, _ = fake_desktop(CHROMIUM)
    clipboard.data["primary"] = ClipSnapshot.from_text("user selection")
    editor = SlowEditor(clipboard, keys, "Hello world", 6)
    editor.delays["<ctrl>+<shift>+<home>"] = 0.0
    editor.delays["<ctrl>+<shift>+<end>"] = 0.3
    strategies: dict[CaptureStrategy, Strategy] = {
        "keyboard": KeyboardCapture(desktop, Settings().capture)
    }
    completer = FakeCompleter()
    pipeline = Pipeline(desktop, completer, Settings(), strategies)

    pipeline.trigger("complete")
    assert pipeline._current is not None
    outcome = await pipeline._current

    assert (outcome.status, outcome.middle) == ("inserted", "big "), outcome
    context = completer.requests[0].context
    assert (context.prefix, context.suffix) == ("Hello ", "world")
    assert editor.text == "Hello big world"
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert clipboard.data["primary"].text() == "user selection"


async def test_a_late_reclaim_of_the_anchored_selection_is_undone() -> None:
    """Chromium re-claims PRIMARY late with what the last select keys chose: for an
    anchored side that is the anchor and the suffix, which is ours, not the user's."""
    desktop, keys, clipboard, _ = fake_desktop(CHROMIUM)
    clipboard.data["primary"] = ClipSnapshot.from_text("user selection")
    SlowEditor(clipboard, keys, "Hello world", 6)
    keyboard = KeyboardCapture(desktop, Settings().capture)

    captured = await keyboard.capture(CHROMIUM, APP)
    assert captured.late is not None
    clipboard.app_claims("primary", " world")
    await captured.late.check_now()

    assert clipboard.data["primary"].text() == "user selection"
    assert not await captured.late.settled()

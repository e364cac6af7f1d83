"""Issue 21: a side of the caret proven empty by the app's answer to a ping, not by a wait.

GTK and Qt handle our keys, claim what they select or copy, and answer a ping in that
order; Chromium claims from its renderer after its browser process answered. Only an app
that showed the first order is trusted, and one late claim ends the trust. The desktop
ports are faked; the capture, the late-claim watch, the paste and the pipeline run for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from anyfill.config.model import CaptureStrategy, Settings
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Strategy
from anyfill.daemon.desktop.capture.keyboard import EMPTY_SIDE_SETTLE_S, KeyboardCapture
from anyfill.daemon.desktop.capture.timings import IN_ORDER_AFTER
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.desktop.ports import ClipSnapshot, Target
from tests.unit.desktop.fakes import FakeClipboard, FakeCompleter, FakeKeys, fake_desktop

EDITOR = Target(window_id=0x500, app="Editor", instance="editor", process="editor")
APP = AppSettings(False, "paste", ("keyboard",), "<ctrl>+v", "<ctrl>+c", (), "")


class OrderedEditor:
    """A text field that handles every key in the order sent, ``lag_s`` after it was
    sent, and claims what a key selects or copies while handling it (GTK, Qt). Its
    pings are answered by FakeWindows at once: with a lag, ahead of the keys (as an
    input method that holds keys back, or Chromium's browser process, answers)."""

    def __init__(self, clipboard: FakeClipboard, keys: FakeKeys, text: str, caret: int) -> None:
        self.clipboard = clipboard
        self.text, self.caret = text, caret
        self.selection: tuple[int, int] | None = None
        self.lag_s = 0.0
        self._queue: list[Callable[[], None]] = []
        keys.on_key = lambda chord: self._handle(lambda: self._key(chord))
        keys.on_paste = lambda: self._handle(self._paste)

    def _handle(self, action: Callable[[], None]) -> None:
        if not self.lag_s:
            action()
            return
        self._queue.append(action)
        if len(self._queue) == 1:
            asyncio.get_running_loop().call_later(self.lag_s, self._drain)

    def _drain(self) -> None:
        queued, self._queue = self._queue, []
        for action in queued:
            action()

    def _key(self, chord: str) -> None:
        if chord in ("<ctrl>+<shift>+<home>", "<ctrl>+<shift>+<end>"):
            anchor = self.selection[0] if self.selection else self.caret
            edge = 0 if "home" in chord else len(self.text)
            start, end = sorted((anchor, edge))
            self.selection = (start, end) if start != end else None
            if self.selection:
                self.clipboard.app_claims("primary", self.text[start:end])
        elif chord == "<ctrl>+c" and self.selection:
            self.clipboard.app_claims("clipboard", self.text[slice(*self.selection)])
        elif chord in ("<left>", "<right>"):
            if self.selection:
                self.caret = self.selection[0] if chord == "<left>" else self.selection[1]
            else:
                self.caret += -1 if chord == "<left>" else 1
            self.selection = None

    def _paste(self) -> None:
        if self.clipboard.app_owns_primary and "clipboard" in self.clipboard.app_owns:
            pasted = self.clipboard.data["clipboard"].text() or ""  # its own copy
        else:
            offer = self.clipboard.current_offer("clipboard")
            assert offer is not None
            offer.note_request()
            if not offer.allows_read():
                return
            offer.note_fetch()
            pasted = offer.snapshot.text() or ""
        start, end = self.selection or (self.caret, self.caret)
        self.text = self.text[:start] + pasted + self.text[end:]
        self.caret, self.selection = start + len(pasted), None


def setup(
    text: str, caret: int
) -> tuple[KeyboardCapture, OrderedEditor, FakeKeys, FakeClipboard, Pipeline]:
    desktop, keys, clipboard, windows = fake_desktop(EDITOR)
    windows.answers_pings = True
    clipboard.data["primary"] = ClipSnapshot.from_text("user selection")
    editor = OrderedEditor(clipboard, keys, text, caret)
    keyboard = KeyboardCapture(desktop, Settings().capture)
    strategies: dict[CaptureStrategy, Strategy] = {"keyboard": keyboard}
    pipeline = Pipeline(desktop, FakeCompleter(), Settings(), strategies)
    return keyboard, editor, keys, clipboard, pipeline


async def learn_the_order(keyboard: KeyboardCapture, editor: OrderedEditor) -> None:
    """Presses mid-line until each side showed the app's order often enough."""
    for _ in range(IN_ORDER_AFTER // 2):
        editor.caret, editor.selection = 6, None
        captured = await keyboard.capture(EDITOR, APP)
        assert captured.late is not None
        await captured.late.settled()
        await asyncio.sleep(0)  # the last side's ping answer is handled


async def test_an_app_that_claims_in_order_has_an_empty_side_proven_at_once() -> None:
    keyboard, editor, keys, clipboard, _ = setup("Hello world", 6)
    await learn_the_order(keyboard, editor)
    assert keyboard.timings.handles_in_order("Editor")
    editor.caret = len(editor.text)
    pressed = len(keys.pressed)

    captured = await keyboard.capture(EDITOR, APP)

    assert (captured.context.prefix, captured.context.suffix) == ("Hello world", "")
    assert captured.late is not None
    # Proven, not waited for: the watch before the insertion ends on the pings' answers.
    assert captured.late.proven
    assert not await captured.late.settled()
    assert captured.late.quiet()
    assert (editor.caret, editor.selection) == (11, None)  # the caret never moved
    assert "<left>" not in keys.pressed[pressed:]  # no collapse after the empty side
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert clipboard.data["primary"].text() == "user selection"


async def test_an_app_that_answers_pings_before_claiming_gets_the_full_watch() -> None:
    keyboard, editor, _, _, _ = setup("Hello world", 6)
    editor.lag_s = 0.005  # its keys are handled after its pings are answered
    await learn_the_order(keyboard, editor)
    assert not keyboard.timings.handles_in_order("Editor")
    editor.caret = len(editor.text)

    captured = await keyboard.capture(EDITOR, APP)

    assert (captured.context.prefix, captured.context.suffix) == ("Hello world", "")
    assert captured.late is not None
    assert captured.late.seconds >= EMPTY_SIDE_SETTLE_S
    assert not captured.late.proven
    assert not captured.late.quiet()  # the whole settle time is watched
    assert not await captured.late.settled()
    assert (editor.caret, editor.selection) == (11, None)


async def test_a_trusted_app_that_handles_keys_after_a_ping_fails_cleanly_and_loses_trust() -> None:
    """The proof is wrong once (an input method starts holding keys back): both sides are
    taken as empty, the app selects and copies late. Nothing of the user's is lost, the
    press says it failed, and no ping is trusted for this app again."""
    keyboard, editor, _, clipboard, pipeline = setup("Hello world", 6)
    await learn_the_order(keyboard, editor)
    assert keyboard.timings.handles_in_order("Editor")
    editor.caret, editor.lag_s = 6, 0.03

    pipeline.trigger("complete")
    assert pipeline._current is not None
    outcome = await pipeline._current

    assert outcome.status == "failed", outcome
    assert editor.text == "Hello world"
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert clipboard.data["primary"].text() == "user selection"
    assert not keyboard.timings.handles_in_order("Editor")

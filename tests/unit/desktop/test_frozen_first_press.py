"""Issue 23: an app that freezes at our first keys on a fresh daemon's first press, longer
than the 1 s anyfill holds the paste when every side came out empty. Where the app answers
pings (GTK, Qt), the paste waits for its answers to the pings sent after our keys, so its
late claims fail the press before the paste keys reach it. The desktop ports are faked;
the capture, the late-claim watch, the paste and the pipeline run for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from anyfill.config.model import CaptureStrategy, Settings
from anyfill.daemon.desktop.capture import late_claims, order
from anyfill.daemon.desktop.capture.base import Strategy
from anyfill.daemon.desktop.capture.keyboard import KeyboardCapture
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Target
from tests.unit.desktop.fakes import (
    FakeClipboard,
    FakeCompleter,
    FakeKeys,
    FakeWindows,
    fake_desktop,
)

EDITOR = Target(window_id=0x500, app="Editor", instance="editor", process="editor")


class OrderedEditor:
    """A text field that handles every key in the order sent, ``lag_s`` after it was
    sent, and claims what a key selects or copies while handling it (GTK, Qt)."""

    def __init__(self, clipboard: FakeClipboard, keys: FakeKeys, text: str, caret: int) -> None:
        self.clipboard, self.keys = clipboard, keys
        self.text, self.caret = text, caret
        self.selection: tuple[int, int] | None = None
        self.anchor = caret
        self.lag_s = 0.0
        self.thaws = False
        """The lag was a freeze: once it handled what was queued, it keeps up."""
        self._queue: list[Callable[[], None]] = []
        self.freeze_at_key = 0.0
        """Freezes this long when the next key comes (after a ping before it was answered)."""
        keys.on_key = lambda chord: self.handle(lambda: self._key(chord), key=True)
        keys.on_paste = lambda: self.handle(self._paste, key=True)

    def handle(self, action: Callable[[], None], *, key: bool = False) -> None:
        """Run ``action`` in turn, after what was sent before."""
        if key and self.freeze_at_key:
            self.lag_s, self.thaws, self.freeze_at_key = self.freeze_at_key, True, 0.0
        if not self.lag_s:
            action()
            return
        self._queue.append(action)
        if len(self._queue) == 1:
            asyncio.get_running_loop().call_later(self.lag_s, self._drain)

    def _drain(self) -> None:
        if self.thaws:
            self.lag_s = 0.0
        queued, self._queue = self._queue, []
        for action in queued:
            action()

    def _key(self, chord: str) -> None:
        if chord in ("<ctrl>+<shift>+<home>", "<ctrl>+<shift>+<end>"):
            if self.selection is None:
                self.anchor = self.caret  # a selection grows from where the caret was
            edge = 0 if "home" in chord else len(self.text)
            start, end = sorted((self.anchor, edge))
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
            read = self.clipboard.app_reads_offer()
            if read is None:
                return
            pasted = read
        start, end = self.selection or (self.caret, self.caret)
        self.text = self.text[:start] + pasted + self.text[end:]
        self.caret, self.selection = start + len(pasted), None


class QueuedWindows(FakeWindows):
    """Pings that wait in the editor's queue, behind the keys sent before them (as GTK
    and Qt answer a second ping only once they handled those keys)."""

    def __init__(self, target: Target, editor: OrderedEditor) -> None:
        super().__init__(target)
        self.editor = editor

    async def ping(self, window_id: int, timeout_s: float) -> bool | None:
        self.pings.append(window_id)
        answered: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.editor.handle(lambda: answered.done() or answered.set_result(True))
        try:
            return await asyncio.wait_for(answered, timeout_s)
        except TimeoutError:
            return False


def frozen_on_the_first_press(
    text: str, caret: int, frozen_s: float
) -> tuple[OrderedEditor, FakeClipboard, Pipeline]:
    """A fresh daemon; the editor answers the ping before the capture, then freezes for
    ``frozen_s`` at our first key and handles everything in order after."""
    desktop, keys, clipboard, _ = fake_desktop(EDITOR)
    clipboard.data["primary"] = ClipSnapshot.from_text("user selection")
    editor = OrderedEditor(clipboard, keys, text, caret)
    editor.freeze_at_key = frozen_s
    windows = QueuedWindows(EDITOR, editor)
    desktop = Desktop(desktop.keys, desktop.clipboard, windows)
    keyboard = KeyboardCapture(desktop, Settings().capture)
    strategies: dict[CaptureStrategy, Strategy] = {"keyboard": keyboard}
    return editor, clipboard, Pipeline(desktop, FakeCompleter(), Settings(), strategies)


@pytest.mark.parametrize(("text", "caret"), [("Hello world t1", 6), ("Hello ", 6)])
async def test_an_app_frozen_past_the_hold_is_waited_for_by_its_pings(
    text: str, caret: int
) -> None:
    """Issue 23: frozen for 1.5 s on a fresh daemon's first press, both sides are taken as
    empty; the 1 s hold alone let the paste keys follow our late copy keys, and the app
    pasted its own copy ("Hello " became "Hello Hello "). Its pings, answered only once
    it handled our keys, hold the paste until its late claims fail the press."""
    editor, clipboard, pipeline = frozen_on_the_first_press(text, caret, 1.5)

    pipeline.trigger("complete")
    assert pipeline._current is not None
    outcome = await pipeline._current

    assert outcome.status == "failed", outcome
    assert "stopped waiting" in outcome.reason
    assert editor.text == text
    assert editor.selection is None
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert clipboard.data["primary"].text() == "user selection"


async def test_an_app_frozen_past_its_ping_timeouts_is_held_until_it_handled_the_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its pings time out (shortened here) before it thaws: the watch holds on, so its
    late claims are still seen, undone and collapsed."""
    monkeypatch.setattr(order, "PING_TIMEOUT_S", 0.1)
    editor, clipboard, pipeline = frozen_on_the_first_press("Hello world", 6, 1.5)

    pipeline.trigger("complete")
    assert pipeline._current is not None
    outcome = await pipeline._current

    assert outcome.status == "failed", outcome
    assert "stopped waiting" in outcome.reason
    assert (editor.text, editor.caret, editor.selection) == ("Hello world", 6, None)
    assert clipboard.data["clipboard"].text() == "user clipboard"
    assert clipboard.data["primary"].text() == "user selection"


async def test_an_app_that_never_handles_the_keys_gets_no_paste(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(order, "PING_TIMEOUT_S", 0.1)
    monkeypatch.setattr(late_claims, "HOLD_CAP_S", 0.5)
    editor, clipboard, pipeline = frozen_on_the_first_press("Hello world", 6, 30.0)

    pipeline.trigger("complete")
    assert pipeline._current is not None
    outcome = await pipeline._current

    assert outcome.status == "failed", outcome
    assert "no sign of handling anyfill's keys" in outcome.reason
    assert "<ctrl>+v" not in editor.keys.pressed
    assert clipboard.data["clipboard"].text() == "user clipboard"

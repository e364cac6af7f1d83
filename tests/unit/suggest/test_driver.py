"""The suggester's bookkeeping with the real pipeline and preview, the AT-SPI field read
faked: a newer ask supersedes the older through the pipeline, and the older one's late end
must not count as the newer's (or a key typed next would not cancel the newer request)."""

from __future__ import annotations

from dataclasses import replace

from anyfill.config.model import AppRule
from anyfill.daemon.context import CaretRect
from anyfill.daemon.desktop.suggest.driver import Suggester
from anyfill.daemon.desktop.suggest.listener import FieldRead, TextEvent
from anyfill.daemon.desktop.suggest.rules import Field
from anyfill.daemon.desktop.suggest.typethrough import Shown
from tests.unit.desktop.test_pipeline import EDITOR
from tests.unit.desktop.test_preview import rig, wait_for
from tests.unit.suggest.test_pipeline_suggest import APP


class FakeSource:
    """The focused field as the listener would read it over D-Bus."""

    def __init__(self, read: FieldRead) -> None:
        self.result = read
        self.reads = 0

    async def read(self, sender: str, path: str) -> FieldRead | None:
        self.reads += 1
        return self.result


async def test_an_older_asks_late_end_does_not_end_the_newer_ones_flight() -> None:
    r = rig()
    live = r.pipeline._read_settings()
    suggester = Suggester(lambda: live, r.pipeline, r.pipeline._desktop, r.completer)
    source = FakeSource(FieldRead(Field("Hello ", ""), 6, CaretRect(10, 10, 1, 16)))
    suggester._source = source  # type: ignore[assignment]
    suggester._field, suggester._target, suggester._app = (":1.9", "/field"), EDITOR, APP
    live.backends[0].url = "http://127.0.0.1:9"  # local: asked automatically

    suggester.trigger._fire()  # the user paused
    await wait_for(lambda: len(r.completer.requests) == 1)
    suggester.trigger._fire()  # paused again (after the caret moved): a newer ask
    await wait_for(lambda: len(r.completer.requests) == 2)
    await wait_for(lambda: r.completer.closed)  # the older request was cancelled
    assert suggester.trigger.busy  # still in flight: the next key cancels it
    suggester.trigger.inserted(6, "x")
    assert suggester.trigger.cancels == 1
    await wait_for(lambda: len(r.completer.closed) == 2)


async def test_a_suggestion_dismissed_with_esc_does_not_come_back_by_type_through() -> None:
    r = rig()
    r.completer.step.set()
    live = r.pipeline._read_settings()
    suggester = Suggester(lambda: live, r.pipeline, r.pipeline._desktop, r.completer)
    suggester._source = FakeSource(FieldRead(Field("Hello ", ""), 6, CaretRect(10, 10, 1, 16)))  # type: ignore[assignment]
    suggester._field, suggester._target, suggester._app = (":1.9", "/field"), EDITOR, APP
    suggester.trigger._fire()
    await wait_for(lambda: r.port.on_key is not None)
    assert suggester.trigger.typethrough.shown is not None  # "big brown " at offset 6
    r.port.press("dismiss")
    await wait_for(lambda: suggester.trigger.typethrough.shown is None)
    assert suggester.trigger.inserted(6, "b") is None  # asked anew, not brought back


async def test_a_new_window_title_keeps_type_through_and_a_title_rule_still_applies() -> None:
    """Mousepad puts '*' before its title at the first key after a save: the suggestion
    asked after that key must still be typed through (it was forgotten, and asked anew,
    in the E2E test). A rule that matches the new title still turns suggestions off."""
    r = rig()
    r.completer.step.set()
    live = r.pipeline._read_settings()
    live.suggestions.auto = True
    live.insert.apps = [AppRule(title="secret", suggest=False)]
    editor = replace(EDITOR, pid=4242, title="notes.txt - Mousepad")
    r.windows.target = editor
    suggester = Suggester(lambda: live, r.pipeline, r.pipeline._desktop, r.completer)
    source = FakeSource(FieldRead(Field("Hello ", ""), 6, CaretRect(10, 10, 1, 16)))
    suggester._source = source  # type: ignore[assignment]

    def typed(text: str, field: str) -> None:
        """``text`` typed, the field then holding ``field`` with the caret at its end."""
        source.result = FieldRead(Field(field, ""), len(field), CaretRect(10, 10, 1, 16))
        at = len(field) - len(text)
        suggester._on_event(TextEvent("insert", ":1.9", "/field", 4242, at, text))

    typed(" ", "Hello ")
    r.windows.target = replace(editor, title="*notes.txt - Mousepad")  # just after the key
    suggester.trigger._fire()  # the user paused
    await wait_for(lambda: suggester.trigger.typethrough.shown is not None)
    assert suggester.trigger.typethrough.shown == Shown(6, "big brown ")

    typed("b", "Hello b")
    assert suggester.trigger.typethrough.shown == Shown(7, "ig brown ")
    await wait_for(lambda: source.reads == 2)  # the rest is read to be shown
    assert len(r.completer.requests) == 1  # nothing asked anew

    r.windows.target = replace(editor, title="*secret.txt - Mousepad")
    typed("i", "Hello bi")
    assert suggester.trigger.typethrough.shown is None
    assert suggester._field is None  # forgotten: no suggestions in this window now

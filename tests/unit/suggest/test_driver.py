"""The suggester's bookkeeping with the real pipeline and preview, the AT-SPI field read
faked: a newer ask supersedes the older through the pipeline, and the older one's late end
must not count as the newer's (or a key typed next would not cancel the newer request)."""

from __future__ import annotations

from anyfill.daemon.context import CaretRect
from anyfill.daemon.desktop.suggest.driver import Suggester
from anyfill.daemon.desktop.suggest.listener import FieldRead
from anyfill.daemon.desktop.suggest.rules import Field
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

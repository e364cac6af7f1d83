"""A suggestion as you type through the real pipeline and preview, the desktop faked at its
edge: nothing shows and no key is taken until the answer is there, only Tab accepts, typing
cancels a suggestion but never a hotkey press, a suggestion never supersedes a hotkey press,
and an accepted suggestion's insertion is not cancelled by the typing that follows."""

from __future__ import annotations

from dataclasses import replace

from anyfill.daemon.bus.status import PreviewShown
from anyfill.daemon.context import CaretRect, Context
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured
from anyfill.daemon.desktop.pipeline import Suggestion
from anyfill.daemon.desktop.preview import Look
from tests.unit.desktop.test_pipeline import EDITOR
from tests.unit.desktop.test_preview import Rig, rig, wait_for

APP = AppSettings(False, "paste", ("accessibility",), "<ctrl>+v", "<ctrl>+c", (), "")
CARET = CaretRect(200, 100, 1, 18)


def suggestion(r: Rig, font: str = "DejaVu Sans Mono") -> Suggestion:
    context = Context("Hello ", "", app="Mousepad", window_id=EDITOR.window_id, caret=CARET)
    captured = Captured(context, "Hello ", "")
    look = Look(auto=True, font_family=font, font_size=11.0)
    return Suggestion(captured, EDITOR, APP, ("first",), r.completer, look)


async def test_nothing_shows_and_no_key_is_taken_until_the_answer_then_only_tab() -> None:
    r = rig()
    task = r.pipeline.suggest(suggestion(r))
    assert task is not None
    await wait_for(lambda: r.completer.requests)
    assert r.of(PreviewShown) == []
    assert r.port.grabs == 0  # Tab still types a tab while the request is in flight
    r.completer.step.set()
    await wait_for(lambda: r.port.on_key is not None)
    shown = r.of(PreviewShown)[0]
    assert (shown.style, shown.auto, shown.font_family) == ("ghost", True, "DejaVu Sans Mono")
    assert set(r.port.grabbed) == {"accept0", "dismiss", "next", "previous"}
    assert str(r.port.grabbed["accept0"]) == "<tab>"  # Enter stays a new line
    r.port.press("accept0")
    outcome = await task
    assert (outcome.action, outcome.middle) == ("suggest", "big brown ")
    assert r.keys.pasted == ["big brown "]
    assert list(r.pipeline.history) == [outcome]  # accepted: in the tray's history


async def test_typing_cancels_a_suggestion_but_never_a_hotkey_press() -> None:
    r = rig()
    task = r.pipeline.suggest(suggestion(r))
    assert task is not None
    await wait_for(lambda: r.completer.requests)
    assert r.pipeline.cancel_suggestion()
    await wait_for(task.done)
    assert task.cancelled()
    assert r.completer.closed == [r.completer.requests[0].id]
    press = await r.press_preview()
    assert not r.pipeline.cancel_suggestion()
    assert not press.done()
    assert r.pipeline.suggest(suggestion(r)) is None  # no suggestion over a hotkey press
    r.port.press("dismiss")
    await press


async def test_a_newer_suggestion_supersedes_the_last_through_latest_wins() -> None:
    r = rig()
    first = r.pipeline.suggest(suggestion(r))
    await wait_for(lambda: r.completer.requests)
    second = r.pipeline.suggest(suggestion(r))
    assert first is not None
    assert second is not None
    await wait_for(first.done)
    assert first.cancelled()
    assert r.completer.cancelled == [r.completer.requests[0].id]
    r.completer.step.set()
    await wait_for(lambda: r.port.on_key is not None)
    r.port.press("dismiss")
    outcome = await second
    assert outcome.status == "dismissed"
    assert r.keys.pasted == []
    assert not r.pipeline.history  # a suggestion typed past is no history


async def test_an_accepted_suggestion_is_inserted_whatever_the_typing_after_it() -> None:
    r = rig()
    r.completer.step.set()
    task = r.pipeline.suggest(suggestion(r))
    assert task is not None
    await wait_for(lambda: r.port.on_key is not None)
    r.port.press("accept0")
    await wait_for(lambda: r.port.on_key is None)
    assert not r.pipeline.cancel_suggestion()  # the paste's own text events arrive now
    assert r.pipeline.suggest(replace(suggestion(r))) is None
    outcome = await task
    assert outcome.status in ("sent", "inserted")
    assert r.keys.pasted == ["big brown "]


async def test_the_style_setting_applies_to_the_preview_hotkey_too() -> None:
    r = rig()
    task = await r.press_preview()
    assert r.of(PreviewShown)[-1].style == "popup"  # unset: the hotkey keeps its popup
    r.port.press("dismiss")
    await task
    live = r.pipeline._read_settings()
    live.suggestions.style = "ghost"
    task = await r.press_preview()
    shown = r.of(PreviewShown)[-1]
    assert (shown.style, shown.auto) == ("ghost", False)
    assert set(r.port.grabbed) == {"accept0", "accept1", "dismiss", "next", "previous"}
    r.port.press("dismiss")
    await task

"""Preview delivery through the real pipeline, with the desktop ports and a streaming
completer faked at their edge: what the popup is told, which keys are taken and given
back, and what goes into the document for each of the user's choices."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from anyfill.config.model import Settings
from anyfill.daemon.backends.base import Plan
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import PreviewClosed, PreviewShown, PreviewText
from anyfill.daemon.completion import Completion, CompletionRequest
from anyfill.daemon.context import CaretRect, ScreenArea
from anyfill.daemon.core import Core
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured
from anyfill.daemon.desktop.hotkeys import Hotkey
from anyfill.daemon.desktop.pipeline import Outcome, Pipeline
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.desktop.preview import (
    PreviewController,
    context_looks_like_code,
    looks_like_code,
)
from anyfill.daemon.errors import BackendUnavailable
from tests.unit.desktop.fakes import fake_desktop
from tests.unit.desktop.test_pipeline import EDITOR, FixedCapture

OWN_KEYCODES = frozenset({23, 36, 9, 64})


class FakePreviewInput:
    """The platform's key grab and activity watch, as the X server would report them."""

    def __init__(self, refused: dict[str, str] | None = None) -> None:
        self.refused = refused or {}
        self.located: list[tuple[Target, CaretRect | None]] = []
        self.grabbed: dict[str, Hotkey] = {}
        self.on_key: Callable[[str], None] | None = None
        self.on_activity: Callable[[str, int], None] | None = None
        self.grabs = 0
        self.releases = 0

    async def grab_keys(
        self, bindings: Mapping[str, Hotkey], on_key: Callable[[str], None]
    ) -> frozenset[int]:
        self.grabbed, self.on_key = dict(bindings), on_key
        self.grabs += 1
        return OWN_KEYCODES

    async def release_keys(self) -> None:
        self.grabbed, self.on_key = {}, None
        self.releases += 1

    def watch_activity(self, on_activity: Callable[[str, int], None]) -> Callable[[], None]:
        self.on_activity = on_activity

        def stop() -> None:
            self.on_activity = None

        return stop

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        """Like sway: the window sits at (100, 50) of output DP-1 (1920×1080 at 0, 0)."""
        self.located.append((target, caret))
        if caret is None:
            return None, None
        moved = CaretRect(caret.x + 100, caret.y + 50, caret.width, caret.height)
        return moved, ScreenArea("DP-1", 0, 0, 1920, 1080)

    @property
    def refused_keys(self) -> dict[str, str]:
        return dict(self.refused)

    def press(self, name: str) -> None:
        assert self.on_key is not None, f"{name} pressed while the popup keys are not grabbed"
        self.on_key(name)


class CaretCapture(FixedCapture):
    """Fixed text, and the caret rectangle the platform reported with it."""

    def __init__(self, *args: Any, caret: CaretRect | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.caret = caret

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        captured = await super().capture(target, app)
        return replace(captured, context=replace(captured.context, caret=self.caret))


@dataclass
class StreamingCompleter:
    """Streams ``chunks`` per backend; each request waits for ``step`` between chunks."""

    answers: dict[str, list[str]]
    step: asyncio.Event = field(default_factory=asyncio.Event)
    requests: list[CompletionRequest] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    """Requests whose stream was interrupted (what closes the HTTP connection)."""

    async def complete(
        self, request: CompletionRequest, on_text: Callable[[str], None] | None = None
    ) -> Completion:
        self.requests.append(request)
        backend = (request.backends or ("first",))[0]
        key = f"{backend}@{request.sample}" if request.sample else backend
        if key not in self.answers:  # as the scheduler ends a chain that nobody answered
            raise BackendUnavailable(backend, f"backend '{backend}': nothing listens")
        text = ""
        try:
            for chunk in self.answers[key]:
                await self.step.wait()
                text += chunk
                if on_text is not None:
                    on_text(text)
        except asyncio.CancelledError:
            self.closed.append(request.id)
            raise
        return Completion(request.id, text, text, backend, Plan("native"), 5.0)

    async def cancel(self, request_id: str) -> bool:
        self.cancelled.append(request_id)
        return True


@dataclass
class Rig:
    pipeline: Pipeline
    completer: StreamingCompleter
    port: FakePreviewInput
    keys: object
    windows: object
    events: list[object]
    core: Core

    async def press_preview(self) -> asyncio.Task[Outcome]:
        self.pipeline.trigger("preview")
        task = self.pipeline._current
        assert task is not None
        await wait_for(lambda: self.port.on_key is not None)
        return task

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


async def wait_for(check: Callable[[], object], within: float = 2.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polls state the fakes change
            await asyncio.sleep(0.001)


def rig(
    answers: dict[str, list[str]] | None = None,
    *,
    port: FakePreviewInput | None = None,
    caret: CaretRect | None = None,
) -> Rig:
    desktop, keys, _clipboard, windows = fake_desktop(EDITOR)
    port = port or FakePreviewInput()
    desktop = replace(desktop, preview_input=port)
    settings = Settings.model_validate(
        {
            "backends": [
                {"name": "first", "type": "llamacpp", "url": "http://127.0.0.1:9"},
                {"name": "second", "type": "llamacpp", "url": "http://127.0.0.1:9"},
            ],
            "routing": {"default": ["first", "second"]},
        }
    )
    bus = EventBus()
    events: list[object] = []
    bus.listen(events.append)
    completer = StreamingCompleter(answers or {"first": ["big ", "brown "], "second": ["red "]})
    preview = PreviewController(desktop, settings, bus)
    pipeline = Pipeline(
        desktop,
        completer,
        settings,
        {
            "keyboard": CaretCapture(
                "keyboard", prefix="x = 1\nHello ", suffix="world\ny", caret=caret
            )
        },
        bus=bus,
        preview=preview,
    )
    core = Core(settings, bus)
    core.attach(pipeline, preview)
    return Rig(pipeline, completer, port, keys, windows, events, core)


# The fake capture cannot read the document back, so a paste reports "sent" (the E2E
# tests see "inserted" in a real editor).
async def test_the_popup_streams_then_tab_inserts_the_final_text_and_gives_the_keys_back() -> None:
    r = rig()
    task = await r.press_preview()
    shown = r.of(PreviewShown)[0]
    assert (shown.line_before, shown.line_after, shown.app) == ("Hello ", "world", "Mousepad")
    assert set(r.port.grabbed) == {"accept0", "accept1", "dismiss", "next", "previous"}
    assert str(r.port.grabbed["accept0"]) == "<tab>"
    r.completer.step.set()
    await wait_for(lambda: any(e.final for e in r.of(PreviewText)))
    texts = [(e.text, e.final) for e in r.of(PreviewText)]
    assert texts == [("big ", False), ("big brown ", False), ("big brown ", True)]

    r.port.press("accept0")
    outcome = await task
    assert (outcome.status, outcome.middle, outcome.backend) == ("sent", "big brown ", "first")
    assert r.keys.pasted == ["big brown "]
    assert r.port.on_key is None
    assert r.port.releases == 1
    assert r.of(PreviewClosed)[0].reason == "accepted"


async def test_esc_closes_the_stream_and_inserts_nothing() -> None:
    r = rig()
    task = await r.press_preview()
    r.port.press("dismiss")
    outcome = await task
    assert outcome.status == "dismissed"
    assert r.completer.closed == [r.completer.requests[0].id]
    assert r.keys.pasted == []
    assert r.keys.typed == []
    assert r.port.on_key is None
    assert r.of(PreviewClosed)[0].reason == "dismissed"


async def test_tab_with_nothing_to_accept_goes_to_the_application() -> None:
    r = rig()
    task = await r.press_preview()
    r.port.press("accept0")  # still "thinking…": no text at all
    outcome = await task
    assert outcome.status == "dismissed"
    assert "<tab> went to the application" in outcome.reason
    assert r.keys.pressed[-1] == "<tab>"  # replayed after the grab was released
    assert r.port.releases == 1
    assert r.of(PreviewClosed)[0].reason == "passed"


async def test_tab_while_text_streams_inserts_the_whole_answer_once_done() -> None:
    r = rig()
    task = await r.press_preview()
    r.completer.step.set()
    await wait_for(lambda: r.of(PreviewText))
    r.completer.step.clear()
    await asyncio.sleep(0.01)
    r.port.press("accept0")
    await asyncio.sleep(0.01)
    assert not task.done()
    r.completer.step.set()
    outcome = await task
    assert (outcome.status, outcome.middle) == ("sent", "big brown ")


async def test_alt_bracket_asks_the_next_backend_and_back_shows_the_first_again() -> None:
    r = rig()
    task = await r.press_preview()
    r.completer.step.set()
    await wait_for(lambda: any(e.final for e in r.of(PreviewText)))
    r.port.press("next")
    await wait_for(lambda: any(e.final and e.alternative == 1 for e in r.of(PreviewText)))
    assert r.completer.requests[1].backends == ("second",)  # not "first" again
    assert r.completer.requests[1].sample == 0  # the next backend's usual answer
    second = next(e for e in r.of(PreviewText) if e.alternative == 1 and e.final)
    assert (second.text, second.backend, second.how) == ("red ", "second", "next backend")
    r.port.press("previous")
    await wait_for(lambda: r.of(PreviewText)[-1].alternative == 0)
    assert len(r.completer.requests) == 2  # kept, not asked again
    r.port.press("accept1")
    outcome = await task
    assert (outcome.middle, outcome.backend) == ("big brown ", "first")


async def test_the_preview_closes_when_the_user_types_clicks_or_the_focus_moves() -> None:
    for cause, act in (
        ("typing", lambda r: r.port.on_activity("key", 38)),
        ("click", lambda r: r.port.on_activity("click", 1)),
        ("focus", lambda r: setattr(r.windows, "target", replace(EDITOR, window_id=0x999))),
    ):
        r = rig()
        task = await r.press_preview()
        r.port.on_activity("key", 23)  # our own Tab / a modifier: not the user typing
        await asyncio.sleep(0.01)
        assert not task.done()
        act(r)
        outcome = await task
        assert (outcome.status, outcome.reason) == ("dismissed", cause), cause
        assert r.completer.closed, cause
        assert r.port.on_key is None


async def test_the_core_commands_reach_the_visible_preview() -> None:
    r = rig()
    assert not r.core.accept()  # nothing visible
    task = await r.press_preview()
    r.completer.step.set()
    await wait_for(lambda: any(e.final for e in r.of(PreviewText)))
    assert r.core.accept()
    outcome = await task
    assert outcome.status == "sent"


async def test_insert_mode_preview_turns_the_complete_hotkey_into_a_preview() -> None:
    r = rig()
    r.core.set_insert_mode("preview")
    r.pipeline.trigger("complete")
    task = r.pipeline._current
    assert task is not None
    await wait_for(lambda: r.port.on_key is not None)
    r.completer.step.set()
    await wait_for(lambda: any(e.final for e in r.of(PreviewText)))
    r.port.press("accept0")
    outcome = await task
    assert (outcome.status, outcome.method) == ("sent", "paste")


def test_code_is_shown_in_monospace_prose_is_not() -> None:
    assert looks_like_code("def f(x):\n    return x + 1")
    assert not looks_like_code("Dear team, thanks for the notes")


def test_a_long_line_of_code_is_judged_by_its_start_too() -> None:
    """The 400 characters before the caret on this line hold nothing of code; its start
    (the indentation and the ``=``) does. The same length of prose stays prose."""
    code = "    total = " + " + ".join(f"weights[{n}] * values[{n}]" for n in range(40))
    assert not looks_like_code(code[-400:])
    assert context_looks_like_code(f"def score(weights, values, bias):\n{code}", "\n")
    prose = "Notes: " + " and then ".join(f"the weight of stone {n}" for n in range(40))
    assert not context_looks_like_code(f"Dear team,\n{prose}", "\n")


async def test_a_failed_backend_is_shown_and_named_when_the_preview_closes() -> None:
    from anyfill.daemon.errors import BackendUnavailable

    r = rig()

    async def refuse(request: CompletionRequest, on_text: object = None) -> Completion:
        raise BackendUnavailable("first", "nothing listens on http://127.0.0.1:9")

    r.completer.complete = refuse  # type: ignore[method-assign]
    task = await r.press_preview()
    await wait_for(lambda: any(e.error for e in r.of(PreviewText)))
    shown = next(e for e in r.of(PreviewText) if e.error)
    assert shown.final
    assert "nothing listens" in shown.error
    r.port.press("accept0")  # nothing to accept: the key goes on to the application
    outcome = await task
    assert outcome.status == "dismissed"
    assert "nothing listens" in outcome.reason
    assert r.keys.pressed[-1] == "<tab>"


async def test_a_focus_event_or_the_targets_text_changing_closes_the_preview() -> None:
    """Wayland: the compositor reports focus changes, AT-SPI the text changes (by pid)."""
    target = replace(EDITOR, pid=4242)
    for cause, act in (
        ("focus", lambda r: r.port.on_activity("focus", 0x999)),
        ("typing", lambda r: r.port.on_activity("text", 4242)),
    ):
        r = rig()
        r.windows.target = target
        task = await r.press_preview()
        r.port.on_activity("focus", target.window_id)  # the target again: nothing moved
        r.port.on_activity("text", 777)  # another application's text: not the user typing
        await asyncio.sleep(0.01)
        assert not task.done(), cause
        act(r)
        outcome = await task
        assert (outcome.status, outcome.reason) == ("dismissed", cause), cause


async def test_the_popup_is_told_the_caret_on_the_desktop_and_its_output() -> None:
    r = rig(caret=CaretRect(30, 40, 1, 18))
    task = await r.press_preview()
    shown = r.of(PreviewShown)[0]
    assert shown.caret == CaretRect(130, 90, 1, 18)
    assert shown.screen == ScreenArea("DP-1", 0, 0, 1920, 1080)
    assert r.port.located[0][0].window_id == EDITOR.window_id
    r.port.press("dismiss")
    await task


async def test_a_key_the_platform_could_not_take_is_not_offered_in_the_hint() -> None:
    port = FakePreviewInput(refused={"previous": "Mod1+bracketleft is bound in your sway config"})
    r = rig(port=port)
    task = await r.press_preview()
    names = [name for name, _ in r.of(PreviewShown)[0].keys]
    assert "previous" not in names
    assert "next" in names
    r.port.press("dismiss")
    await task


async def test_with_no_accept_key_the_shortcut_again_inserts_and_the_popup_says_so() -> None:
    """Wayland without compositor IPC: no key can be taken, so the preview shortcut pressed
    again inserts (instead of starting another completion) and cancel dismisses."""
    refused = dict.fromkeys(("accept0", "accept1", "dismiss", "next", "previous"), "no IPC")
    r = rig(port=FakePreviewInput(refused=refused))
    task = await r.press_preview()
    shown = r.of(PreviewShown)[0]
    assert shown.keys == ()
    assert "preview shortcut again: insert" in shown.hint
    r.completer.step.set()
    await wait_for(lambda: any(e.final for e in r.of(PreviewText)))
    r.pipeline.trigger("preview")
    outcome = await task
    assert (outcome.status, outcome.middle) == ("sent", "big brown ")
    assert len(r.completer.requests) == 1  # no second completion was started

    task = await r.press_preview()
    r.pipeline.trigger("cancel")
    await asyncio.gather(task, return_exceptions=True)
    assert r.of(PreviewClosed)[-1].reason == "cancelled"
    assert r.keys.pasted == ["big brown "]  # nothing more


async def test_with_accept_keys_the_shortcut_again_starts_a_new_preview() -> None:
    r = rig()
    await r.press_preview()
    first = r.pipeline._current
    r.pipeline.trigger("preview")
    assert r.pipeline._current is not first  # superseded, as before
    assert r.of(PreviewShown)[0].hint == ""
    r.pipeline.cancel()


async def test_alt_bracket_with_the_only_answering_backend_asks_it_for_another_sample() -> None:
    """Alt+] asked the same backend again when it was the only one answering: the same
    answer (temperature 0.1, and the cache). Now the others are tried first, then the one
    that answered gives another sample (its own seed, past the cache), and the popup says
    which it is."""
    r = rig({"first": ["big ", "brown "], "first@1": ["small "], "first@2": ["tiny "]})
    task = await r.press_preview()
    r.completer.step.set()
    await wait_for(lambda: any(e.final for e in r.of(PreviewText)))
    r.port.press("next")
    await wait_for(lambda: any(e.final and e.alternative == 1 for e in r.of(PreviewText)))
    tried, sampled = r.completer.requests[1:3]
    assert (tried.backends, tried.sample) == (("second",), 0)  # down: it raised
    assert (sampled.backends, sampled.sample) == (("first",), 1)
    shown = next(e for e in r.of(PreviewText) if e.alternative == 1 and e.final)
    assert (shown.text, shown.backend, shown.how, shown.error) == (
        "small ",
        "first",
        "another sample",
        "",
    )
    r.port.press("next")  # every backend tried: straight to another sample, another seed
    await wait_for(lambda: any(e.final and e.alternative == 2 for e in r.of(PreviewText)))
    third = r.completer.requests[3]
    assert (third.backends, third.sample) == (("first",), 2)
    assert len(r.completer.requests) == 4
    r.port.press("accept0")
    outcome = await task
    assert (outcome.middle, outcome.backend) == ("tiny ", "first")

"""A fresh daemon's first press in a Chromium page whose renderer is frozen (issue 23).

The page blocks its main thread on the first key it gets, longer than the 1 s anyfill
holds the paste when every side of the caret came out empty in an app never seen
answering. Every capture key waits in the renderer's queue, so both sides are taken as
empty; Chromium's browser process answers the pings meanwhile, so they prove nothing.
Before, the paste keys then queued behind the capture keys and the renderer, once
thawed, pasted its own late copy: the prefix again at a caret at the end of the text,
or the suffix over its late selection of it (the caret left after it).

Now the hold lasts until the window is drawn again after the browser read the keys
(the frozen renderer draws nothing, not even its caret's blink), and the pings after
that frame are answered: the late claims then show, the press fails cleanly, and the
document, the caret and the user's selections stay as they were. A page that was
really empty completes once it has drawn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from anyfill.daemon.x11.connection import XConnection
from anyfill.daemon.x11.windows import X11Windows
from tests.e2e.chromium import CHROMIUM, SKIP_REASON, StateRecorder, page_windows
from tests.e2e.harness import Daemon, Outcome, XSession, daemon_config, wait_until
from tests.e2e.test_capture_recheck import KEY, OWN_KEYS
from tests.e2e.test_qt_target import (
    USER_CLIP,
    USER_PRIMARY,
    answer_next,
    assert_selections_restored,
    infill,
    unique,
)
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON),
]
PAGE = Path(__file__).with_name("chromium_target.html")
FREEZE_MS = 2500
"""Longer than the 1 s hold, well within the 10 s an app gets to show anything."""

Opener = Callable[[str, int], StateRecorder]


@pytest.fixture
def frozen_page(x: XSession) -> Iterator[Opener]:
    """Opens the textarea page holding ``text``, the caret at ``caret``; its first key
    blocks the renderer for FREEZE_MS."""
    with page_windows(x, PAGE, "chromium-frozen") as open_page:
        yield lambda text, caret: open_page(
            {"text": text, "caret": caret, "freeze_ms": FREEZE_MS},
            lambda state: state.get("text") == text,
        )


@pytest.fixture
def fresh(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """A daemon that never saw Chromium: the press is its first there."""
    # Its debug log says what it waited for, should a run fail.
    config = daemon_config(llama[1].url, OWN_KEYS).replace('level = "INFO"', 'level = "DEBUG"')
    process = Daemon(x, config, name="anyfill-frozen")
    yield process
    process.stop()


def drawn_within(x: XSession, window_id: int, seconds: float) -> bool:
    async def watch() -> bool:
        async with XConnection(x.display) as conn:
            paints = await X11Windows(conn).watch_paints(window_id)
            assert paints is not None
            try:
                return await paints.drawn(seconds)
            finally:
                paints.close()

    return asyncio.run(watch())


def press(x: XSession, daemon: Daemon) -> Outcome:
    """The hotkey, and the press's outcome: up to the 10 s hold and the backend."""
    count = len(daemon.outcomes())
    x.key(KEY)
    return daemon.wait_outcome(count + 1, within=20)


def settled(page: StateRecorder, seconds: float = 1.0) -> dict[str, Any]:
    """The page's state once it has not changed for ``seconds`` (a late paste shows by
    then: the page reports every 20 ms once thawed)."""
    last: dict[str, Any] = {}
    changed = [0.0]

    def still() -> bool:
        now = time.monotonic()
        if page.state != last:
            last.clear()
            last.update(page.state)
            changed[0] = now
        return now - changed[0] >= seconds

    wait_until(still, 15, "the page to settle")
    return dict(last)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("caret_at_the_end", lambda text: (text + " ", len(text) + 1)),
        ("caret_mid_line", lambda text: (text, 6)),
    ],
)
def test_a_frozen_renderer_gets_no_paste_of_its_own_late_copy(
    name: str,
    make: Callable[[str], tuple[str, int]],
    x: XSession,
    fresh: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    frozen_page: Opener,
) -> None:
    text, caret = make(unique("Hello world"))
    page = frozen_page(text, caret)
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    answer_next(llama[0], Reply(text="big "))
    before = len(infill(llama[1]))

    outcome = press(x, fresh)

    sent = [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in infill(llama[1])[before:]]
    state = settled(page)
    if outcome.status == "inserted":  # the true context reached the backend after all
        assert sent[-1:] == [(text[:caret], text[caret:])], sent
        assert state["text"] == text[:caret] + "big " + text[caret:]
    else:
        assert outcome.status == "failed", (outcome, state, sent, fresh.log()[-3000:])
        assert "check the document" not in outcome.reason, outcome
        assert state["text"] == text, (name, state, outcome)
        assert (state["start"], state["end"]) == (caret, caret), (name, state, outcome)
    assert state["pastes"] <= 1, state
    assert_selections_restored(x)


def test_an_empty_page_frozen_on_the_first_press_completes_once_it_drew(
    x: XSession,
    fresh: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    frozen_page: Opener,
) -> None:
    page = frozen_page("", 0)
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    answer_next(llama[0], Reply(text="Dear team,"))
    before = len(infill(llama[1]))

    outcome = press(x, fresh)

    sent = [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in infill(llama[1])[before:]]
    assert sent == [("", "")], sent
    assert outcome.status == "inserted", (outcome, fresh.log()[-3000:])
    assert outcome.ms >= FREEZE_MS, outcome  # held until the thawed renderer drew
    state = settled(page)
    assert state["text"] == "Dear team,", state
    assert (state["start"], state["end"]) == (10, 10), state
    assert_selections_restored(x)


@pytest.fixture
def still_caret_page(x: XSession) -> Iterator[Opener]:
    """The textarea page in a Chromium whose caret does not blink (GTK's setting, which
    Chromium follows; a desktop's accessibility option)."""
    settings = x.workdir / "config" / "gtk-3.0" / "settings.ini"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text("[Settings]\ngtk-cursor-blink = false\n")
    try:
        with page_windows(x, PAGE, "chromium-still-caret") as open_page:
            yield lambda text, caret: open_page(
                {"text": text, "caret": caret, "freeze_ms": FREEZE_MS},
                lambda state: state.get("text") == text,
            )
    finally:
        settings.unlink()


def test_an_empty_frozen_page_whose_caret_does_not_blink_completes_once_it_drew(
    x: XSession,
    fresh: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    still_caret_page: Opener,
) -> None:
    """No blink to wait for: Chromium draws the caret again when it has handled the
    select keys, even in an empty field where they select nothing. The renderer, just
    thawed, then read the paste 120-135 ms after the keys, past the quiet period that
    ended a paste: the user's restored clipboard went in, and then the completion, as
    the read-back took any text for an unchanged empty prefix."""
    page = still_caret_page("", 0)
    wid = x.find_window("chromium")
    assert not drawn_within(x, wid, 1.5), "the caret blinks: the setting did not take"
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    answer_next(llama[0], Reply(text="Dear team,"))

    outcome = press(x, fresh)

    assert outcome.status == "inserted", (outcome, fresh.log()[-3000:])
    assert outcome.ms >= FREEZE_MS, outcome
    state = settled(page)
    assert state["text"] == "Dear team,", state
    assert_selections_restored(x)

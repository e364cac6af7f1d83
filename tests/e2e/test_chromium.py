"""The same path in Chromium from Debian: it reads the pasted clipboard twice and inserts
the second read, so the user's clipboard may only come back after it went quiet.

The page posts its textarea's value and caret to a loopback recorder after each change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.chromium import CHROMIUM, SKIP_REASON, StateRecorder, page_windows
from tests.e2e.harness import Daemon, XSession, wait_until
from tests.e2e.test_qt_target import (
    USER_CLIP,
    USER_PRIMARY,
    answer_next,
    assert_selections_restored,
    infill,
    press,
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


@pytest.fixture
def chromium(x: XSession) -> Iterator[Callable[[str, int], StateRecorder]]:
    """Opens the textarea page holding ``text``, the caret at ``caret``."""
    with page_windows(x, PAGE, "chromium") as open_page:
        yield lambda text, caret: open_page(
            {"text": text, "caret": caret}, lambda state: state.get("text") == text
        )


@pytest.mark.parametrize(
    ("name", "reply"),
    [("mid_line", "big "), ("multi_line", "\n    return y ✓")],
)
def test_completion_in_chromium(
    name: str,
    reply: str,
    x: XSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    chromium: Any,
) -> None:
    if name == "mid_line":
        text = unique("Hello world")
        caret = 6
    else:
        text = unique("def f(x):") + "\n"
        caret = len(text) - 1
    page = chromium(text, caret)
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    responder, server = llama
    answer_next(responder, Reply(text=reply))
    before = len(infill(server))

    outcome = press(x, daemon)

    assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome
    sent = infill(server)[before:]
    assert [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in sent] == [
        (text[:caret], text[caret:])
    ]
    expected = text[:caret] + reply + text[caret:]
    wait_until(lambda: page.state.get("text") == expected, 5, "the completion in the page")
    end = caret + len(reply)
    wait_until(lambda: (page.state["start"], page.state["end"]) == (end, end), 5, "the caret")
    assert_selections_restored(x)

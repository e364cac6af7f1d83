"""Rich text in Chromium (a contenteditable editor, as in web mail and chat apps): the
keyboard capture, its anchored suffix included, reads exactly what the user sees on each
side of the caret, and the completion lands at the caret.

The suffix is copied from one character early (the anchor, see capture/keyboard.py) and
that character cut off the copy. Should rich text copy it differently, the side is copied
again the plain way; in every case here Chromium's copy starts with it. The backend must
get the text as Chromium copies it (what innerText shows, a no-break space as a plain
one), and the document must come out exact with the caret after the completion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anyfill.daemon.desktop.capture.keyboard import ANCHOR_MISSING_LOG
from tests.e2e.chromium import CHROMIUM, SKIP_REASON, StateRecorder, page_windows
from tests.e2e.harness import Daemon, XSession, wait_until
from tests.e2e.test_qt_target import (
    USER_CLIP,
    USER_PRIMARY,
    answer_next,
    assert_selections_restored,
    infill,
    press,
)
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON),
]
PAGE = Path(__file__).with_name("chromium_rich_target.html")
CARET = "\u2038"

CASES = {
    # (the editor's HTML with the caret, what the backend must get before and after it;
    # the page's text is that, no-break spaces read as plain ones)
    "mid_word": ("Hello wo‸rld", "Hello wo", "rld"),
    "after_a_space": ("Hello ‸world", "Hello ", "world"),
    "after_bold": ("Dear <b>team‸</b>, see below", "Dear team", ", see below"),
    "before_bold": ("Dear ‸<b>team</b>, see below", "Dear ", "team, see below"),
    "second_block": ("<div>line one</div><div>line t‸wo</div>", "line one\nline t", "wo"),
    "start_of_block": ("<div>line one</div><div>‸line two</div>", "line one\n", "line two"),
    # Chromium copies a no-break space as a plain one: the backend gets that.
    "after_nbsp": ("Hello&nbsp;‸world", "Hello ", "world"),
    "end_of_document": ("<div>Kind regards,</div><div>Ann‸</div>", "Kind regards,\nAnn", ""),
}

Opener = Callable[[str], StateRecorder]


@pytest.fixture
def rich_page(x: XSession) -> Iterator[Opener]:
    with page_windows(x, PAGE, "chromium-rich") as open_page:
        yield lambda html: open_page({"html": html}, lambda state: "text" in state)


@pytest.mark.parametrize("name", list(CASES))
def test_completion_in_rich_text(
    name: str,
    x: XSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    rich_page: Opener,
) -> None:
    html, prefix, suffix = CASES[name]
    assert html.count(CARET) == 1
    page = rich_page(html)
    assert plain(page.state["text"]) == prefix + suffix
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    responder, server = llama
    reply = "ly, and more"
    answer_next(responder, Reply(text=reply))
    before = len(infill(server))
    fallbacks = daemon.log().count(ANCHOR_MISSING_LOG)

    outcome = press(x, daemon)

    assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome
    # Every case here ends its prefix in a character the suffix can be anchored on, and
    # Chromium's copy starts with it: the suffix came from the anchored copy, cut exactly.
    assert daemon.log().count(ANCHOR_MISSING_LOG) == fallbacks
    sent = [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in infill(server)[before:]]
    assert sent == [(prefix, suffix)]
    wanted = {"text": prefix + reply + suffix, "before": prefix + reply, "collapsed": True}

    def shown() -> dict[str, object]:
        state = page.state
        return {"text": plain(state["text"]), "before": plain(state["before"] or ""),
                "collapsed": state["collapsed"]}  # fmt: skip

    try:
        wait_until(lambda: shown() == wanted, 5, "the completion at the caret")
    except TimeoutError:
        raise AssertionError(f"the page shows {page.state}, not {wanted}") from None
    assert_selections_restored(x)


def plain(text: str) -> str:
    """Text as the tests compare it: Chromium's editing turns a no-break space into a
    plain one (and back) as the text around it changes, and both look the same."""
    return text.replace("\xa0", " ")

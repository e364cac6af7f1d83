"""Text beyond ASCII read over AT-SPI on X11, in a Qt editor (our target app) and in
Mousepad (GTK): the prefix and suffix sent to the backend are split exactly at the caret,
the pasted completion is checked by reading the document back, and the document is
exactly what was asked. Qt's offsets are UTF-16 units: an emoji before the caret used to
move the split by one and a correct insertion was reported as failed.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.e2e.test_accessibility import MISSING, a11y  # noqa: F401 - the fixture
from tests.e2e.test_qt_target import USER_CLIP, answer_next, infill, press
from tests.e2e.unicode_cases import CASES, sent_since, tally, utf16
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(MISSING), reason=f"accessibility tests need {MISSING}"),
]


@pytest.fixture(scope="module")
def a11y_only(a11y: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:  # noqa: F811
    """Capture over AT-SPI only: a keyboard fallback would hide a wrong AT-SPI read."""
    config = daemon_config(llama[1].url, '[capture]\nstrategies = ["accessibility"]\n')
    process = Daemon(a11y, config, name="anyfill-unicode")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def qt(a11y: XSession) -> Iterator[QtTarget]:  # noqa: F811
    target = QtTarget(a11y, "anyfill-unicode-qt")
    yield target
    target.close()


@pytest.mark.parametrize("name", list(CASES))
def test_qt_editor(
    name: str,
    a11y: XSession,  # noqa: F811
    a11y_only: Daemon,
    qt: QtTarget,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    case = CASES[name]
    responder, server = llama
    qt.set(case.text, utf16(case.text[: case.caret]))  # Qt's cursor counts UTF-16 units
    a11y.focus(qt.wid)
    a11y.set_clipboard(USER_CLIP)
    answer_next(responder, Reply(text=case.reply))
    before = len(infill(server))

    outcome = press(a11y, a11y_only)

    state = qt.state()
    tally("Qt X11", exact=state["text"] == case.expected, inserted=outcome.status == "inserted")
    sent = sent_since(server, before)
    assert sent == [(case.text[: case.caret], case.text[case.caret :])]
    assert state["text"] == case.expected
    assert (outcome.status, outcome.capture) == ("inserted", "accessibility"), outcome
    assert state["caret"] == utf16(case.expected[: case.end])
    assert a11y.get_clipboard() == USER_CLIP


@pytest.mark.skipif(shutil.which("mousepad") is None, reason="needs mousepad (Debian)")
@pytest.mark.parametrize("name", list(CASES))
def test_mousepad(
    name: str,
    a11y: XSession,  # noqa: F811
    a11y_only: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    case = CASES[name]
    responder, server = llama
    path = a11y.workdir / f"unicode-{name}.txt"
    path.write_text(case.text, encoding="utf-8")
    where = [f"--line={case.line}", f"--column={case.column}"]
    editor = a11y.spawn(["mousepad", "--disable-server", *where, str(path)], "mousepad.log")
    try:
        a11y.focus(a11y.find_window("mousepad"))
        a11y.set_clipboard(USER_CLIP)
        answer_next(responder, Reply(text=case.reply))
        before = len(infill(server))

        outcome = press(a11y, a11y_only)

        a11y.key("bar")  # lands at the caret: after the completion
        saved = path.stat().st_mtime_ns
        a11y.key("ctrl+s")
        wait_until(lambda: path.stat().st_mtime_ns != saved, 5, "Mousepad to save")
        document = path.read_text(encoding="utf-8")
        marked = case.expected[: case.end] + "|" + case.expected[case.end :]
        tally("Mousepad X11", exact=document == marked, inserted=outcome.status == "inserted")
        sent = sent_since(server, before)
        assert sent == [(case.text[: case.caret], case.text[case.caret :])]
        assert document == marked
        assert (outcome.status, outcome.capture) == ("inserted", "accessibility"), outcome
        assert a11y.get_clipboard() == USER_CLIP
    finally:
        os.killpg(editor.pid, signal.SIGTERM)
        editor.wait(10)

"""The end of a document, where the side after the caret has nothing to select, after
presses mid-line in the same app (GTK: Mousepad; Qt: our target): the document comes out
exact, the caret after the insertion, the user's CLIPBOARD and PRIMARY kept.
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, wait_until
from tests.e2e.test_mousepad import Editor
from tests.e2e.test_qt_target import (
    USER_CLIP,
    USER_PRIMARY,
    answer_next,
    assert_selections_restored,
    infill,
    prepare,
    press,
)
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop
MID_PRESSES = 3
"""Mid-line presses before the end of the document: the app's waits are learned."""


def complete(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer], reply: str
) -> tuple[str, str]:
    """One press; the prefix and suffix the backend got."""
    responder, server = llama
    answer_next(responder, Reply(text=reply))
    before = len(infill(server))
    outcome = press(x, daemon)
    assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome
    requests = infill(server)
    assert len(requests) == before + 1
    sent = requests[-1].json()
    return sent["input_prefix"], sent["input_suffix"]


def test_qt_target_end_of_document(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer], qt: QtTarget
) -> None:
    for run in range(MID_PRESSES):
        text = f"Hello world q{run}"
        prepare(x, qt, text, 6)
        assert complete(x, daemon, llama, "big ") == (text[:6], text[6:])
        assert qt.state()["text"] == text[:6] + "big " + text[6:]

    for run in range(3):
        text = f"def end_{run}(x):\n    return"
        prepare(x, qt, text, len(text))
        assert complete(x, daemon, llama, " x * 2") == (text, "")
        state = qt.state()
        assert (state["text"], state["caret"]) == (text + " x * 2", len(text) + 6)
        assert_selections_restored(x, qt)


@pytest.mark.skipif(shutil.which("mousepad") is None, reason="needs mousepad (Debian)")
def test_mousepad_end_of_document(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    def edit(name: str, text: str, line: int, column: int) -> Editor:
        """A Mousepad window alone on the screen (the next is found by its class)."""
        path = x.workdir / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        argv = ["mousepad", "--disable-server", f"--line={line}", f"--column={column}", str(path)]
        process = x.spawn(argv, "mousepad.log")
        editor = Editor(path, x.find_window("mousepad"), process)
        x.focus(editor.wid)
        x.set_clipboard(USER_CLIP)
        x.set_clipboard(USER_PRIMARY, "primary")
        return editor

    def saved_and_closed(editor: Editor) -> str:
        """The document as Mousepad saves it, a '|' typed at the caret first."""
        try:
            x.key("bar")
            mtime = editor.path.stat().st_mtime_ns
            x.key("ctrl+s")
            wait_until(lambda: editor.path.stat().st_mtime_ns != mtime, 5, "Mousepad to save")
            return editor.path.read_text(encoding="utf-8")
        finally:
            os.killpg(editor.process.pid, signal.SIGTERM)
            editor.process.wait(10)

    for run in range(MID_PRESSES):
        text = f"alpha beta o{run}\ngamma\n"
        editor = edit(f"mid{run}", text, 1, 6)
        try:
            assert complete(x, daemon, llama, "big ") == (text[:6], text[6:])
            assert_selections_restored(x)
        finally:
            document = saved_and_closed(editor)
        assert document == text[:6] + "big |" + text[6:]

    for run in range(3):
        text = f"def end_{run}(x):\n    return"  # no newline after: the caret ends the file
        editor = edit(f"end{run}", text, 2, 10)
        try:
            assert complete(x, daemon, llama, " x * 2") == (text, "")
            assert_selections_restored(x)
        finally:
            document = saved_and_closed(editor)
        assert document == text + " x * 2|"

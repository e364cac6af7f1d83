"""The same path in a real third-party GTK editor from Debian: Mousepad.

The document is read back from disk after Ctrl+S. Before saving, a '|' is typed: it lands
at the caret, so the saved file shows where the caret was, and that no selection was left
(a selection would have been replaced by the '|').
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import REPEAT
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
    pytest.mark.skipif(shutil.which("mousepad") is None, reason="needs mousepad (Debian)"),
]
_tags = itertools.count(1)


@dataclass(frozen=True)
class Case:
    lines: tuple[str, ...]
    line: int
    """1-based, as ``mousepad --line`` takes it."""
    column: int
    reply: str


CASES = {
    "mid_line": Case(("alpha beta {tag}", "gamma"), 1, 6, "big "),
    "line_start": Case(("alpha {tag}", "gamma delta"), 2, 0, "new "),
    "non_ascii": Case(("Grüße aus Köln ✓ {tag}", "日本語"), 1, 6, "schöne ✓ "),
    "multi_line": Case(("def g_{tag}(x):", ""), 1, 100, "\n    y = x * 2\n    return y"),
}


@dataclass
class Editor:
    path: Path
    wid: int
    process: subprocess.Popen[bytes]


@pytest.fixture
def open_in_mousepad(x: XSession) -> Iterator[object]:
    editors: list[Editor] = []

    def open_file(text: str, line: int, column: int) -> Editor:
        path = x.workdir / f"doc{len(editors)}.txt"
        path.write_text(text, encoding="utf-8")
        process = x.spawn(
            ["mousepad", "--disable-server", f"--line={line}", f"--column={column}", str(path)],
            "mousepad.log",
        )
        editor = Editor(path, x.find_window("mousepad"), process)
        editors.append(editor)
        x.focus(editor.wid)
        return editor

    yield open_file
    for editor in editors:
        os.killpg(editor.process.pid, signal.SIGTERM)
        editor.process.wait(10)


@pytest.mark.parametrize("rep", range(REPEAT))
@pytest.mark.parametrize("name", list(CASES))
def test_completion_in_mousepad(
    name: str,
    rep: int,
    x: XSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    open_in_mousepad: object,
) -> None:
    case = CASES[name]
    tag = f"m{next(_tags)}"
    lines = [line.replace("{tag}", tag) for line in case.lines]
    text = "\n".join(lines) + "\n"
    column = min(case.column, len(lines[case.line - 1]))
    caret = sum(len(line) + 1 for line in lines[: case.line - 1]) + column
    editor = open_in_mousepad(text, case.line, column)  # type: ignore[operator]
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    responder, server = llama
    answer_next(responder, Reply(text=case.reply))
    before = len(infill(server))

    outcome = press(x, daemon)

    assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome
    assert outcome.app == "Mousepad"
    requests = infill(server)
    assert len(requests) == before + 1
    sent = requests[-1].json()
    assert (sent["input_prefix"], sent["input_suffix"]) == (text[:caret], text[caret:])
    assert_selections_restored(x)
    x.key("bar")
    saved = editor.path.stat().st_mtime_ns
    x.key("ctrl+s")
    wait_until(lambda: editor.path.stat().st_mtime_ns != saved, 5, "Mousepad to save")
    expected = text[:caret] + case.reply + "|" + text[caret:]
    assert editor.path.read_text(encoding="utf-8") == expected

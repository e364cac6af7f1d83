"""Text beyond ASCII on Wayland (sway headless), read and inserted over AT-SPI in a native
Wayland Qt editor (our target app) and in native Wayland Mousepad (GTK): the split sent to
the backend is exact, the document is exactly prefix + completion + suffix (Qt used to
get NULs and stray memory after a non-ASCII completion, reported "inserted"), and the
caret ends after the completion.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.e2e.harness import Daemon, QtTarget, daemon_config, wait_until
from tests.e2e.test_wayland import USER_CLIP, answer, infill, trigger
from tests.e2e.unicode_cases import CASES, sent_since, tally, utf16
from tests.e2e.wayland import UNUSABLE, Editor, WaylandSession, open_mousepad, wait_accessible
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]


@pytest.fixture(scope="module")
def wl() -> Iterator[WaylandSession]:
    trigger_cmd = f"{sys.executable} -m anyfill.daemon.launcher trigger complete"
    with WaylandSession.start(f"bindsym --release Ctrl+Alt+space exec {trigger_cmd}\n") as session:
        yield session


@pytest.fixture(scope="module")
def a11y_only(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """Capture over AT-SPI only: a keyboard fallback would hide a wrong AT-SPI read."""
    config = daemon_config(llama[1].url, '[capture]\nstrategies = ["accessibility"]\n')
    process = Daemon(wl, config, "anyfill-wl-unicode", runtime_dir=wl.run_dir)  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture(scope="module")
def qt(wl: WaylandSession) -> Iterator[QtTarget]:
    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, "anyfill-wl-unicode-qt")  # type: ignore[arg-type]
    wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")
    # Focused in sway is not yet focused over AT-SPI: a busy Qt app builds its tree and
    # reports the focused field later, and a press before that finds no text field.
    wait_accessible(wl, target.process.pid, 20)
    yield target
    target.close()


@pytest.mark.parametrize("name", list(CASES))
def test_qt_editor(
    name: str,
    wl: WaylandSession,
    a11y_only: Daemon,
    qt: QtTarget,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    case = CASES[name]
    qt.set(case.text, utf16(case.text[: case.caret]))  # Qt's cursor counts UTF-16 units
    wl.set_clipboard(USER_CLIP)
    answer(llama, Reply(text=case.reply))
    before = len(infill(llama[1]))

    outcome = trigger(a11y_only)

    state = qt.state()
    tally("Qt Wayland", exact=state["text"] == case.expected, inserted=outcome.status == "inserted")
    sent = sent_since(llama[1], before)
    assert sent == [(case.text[: case.caret], case.text[case.caret :])]
    assert state["text"] == case.expected
    assert (outcome.status, outcome.method, outcome.capture) == (
        "inserted",
        "accessibility",
        "accessibility",
    ), outcome
    assert state["caret"] == utf16(case.expected[: case.end])
    assert wl.get_clipboard() == USER_CLIP


@pytest.fixture
def editors() -> Iterator[list[Editor]]:
    opened: list[Editor] = []
    yield opened
    for editor in opened:
        editor.close()


@pytest.mark.parametrize("name", list(CASES))
def test_mousepad(
    name: str,
    wl: WaylandSession,
    a11y_only: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    case = CASES[name]
    editor = open_mousepad(wl, case.text, case.line, case.column)
    editors.append(editor)
    wl.set_clipboard(USER_CLIP)
    answer(llama, Reply(text=case.reply))
    before = len(infill(llama[1]))

    outcome = trigger(a11y_only)

    wl.type_text("|")  # lands at the caret: after the completion
    marked = case.expected[: case.end] + "|" + case.expected[case.end :]
    document = wait_until(lambda: _with_mark(editor.save()), 5, "the typed mark in the document")
    tally("Mousepad Wayland", exact=document == marked, inserted=outcome.status == "inserted")
    sent = sent_since(llama[1], before)
    assert sent == [(case.text[: case.caret], case.text[case.caret :])]
    assert document == marked
    assert (outcome.status, outcome.method, outcome.capture) == (
        "inserted",
        "accessibility",
        "accessibility",
    ), outcome
    assert wl.get_clipboard() == USER_CLIP


def _with_mark(document: str) -> str:
    return document if "|" in document else ""

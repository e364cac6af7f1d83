"""Suggestions as you type, for real: a private X server with its own D-Bus session and
accessibility bus, ``anyfill run`` with the tray and ``suggestions.auto`` on, the Qt target
and Mousepad typed into with xdotool, the loopback llama.cpp responder answering.

What the user relies on: a burst of typing asks nothing; a pause shows dimmed text at the
caret while the editor keeps the focus, in a window that takes no clicks; Tab inserts
exactly the suggestion and the clipboard stays the user's; Esc and typing on dismiss it;
typing its first characters keeps the rest showing without a new request; a focus change
hides it and nothing is inserted.

``ANYFILL_SCREENSHOTS=DIR`` also saves the ghost text picture of the docs into DIR.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from tests.e2e.chromium import CHROMIUM, SKIP_REASON, page_windows
from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.e2e.test_accessibility import MISSING, a11y
from tests.e2e.test_qt_target import USER_CLIP, answer_next, infill
from tests.e2e.wayland import wait_accessible
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

__all__ = ["a11y"]

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(MISSING), reason=f"suggestion tests need {MISSING}"),
]

CONFIG = """
[hotkeys]
complete = "<ctrl>+<alt>+o"
preview = "<ctrl>+<alt>+p"
cancel = "<ctrl>+<alt>+j"

[capture]
strategies = ["accessibility"]

[suggestions]
auto = true
"""
GHOST = "anyfill suggestion"
SCREENSHOTS = os.environ.get("ANYFILL_SCREENSHOTS", "")
TYPE_DELAY_MS = 120
"""xdotool's delay between typed keys: a steady burst, faster than the adaptive pause."""


@pytest.fixture(scope="module")
def suggesting(a11y: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    config = daemon_config(llama[1].url, CONFIG).replace('level = "INFO"', 'level = "DEBUG"')
    daemon = Daemon(a11y, config, name="suggest", headless=False)
    wait_until(lambda: "listening to the focused application" in daemon.log(), 10, "listener")
    yield daemon
    if os.environ.get("ANYFILL_E2E_LOG"):
        Path(os.environ["ANYFILL_E2E_LOG"]).write_text(daemon.log())
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.log(), daemon.log()[-3000:]


@pytest.fixture(scope="module")
def qt(a11y: XSession) -> Iterator[QtTarget]:
    target = QtTarget(a11y, "anyfill-suggest-target")
    yield target
    target.close()


def ghost_windows(x: XSession) -> list[int]:
    out = x.run("xdotool", "search", "--onlyvisible", "--name", GHOST, check=False)
    return [int(w) for w in out.split() if w.isdigit()]  # an X error may be in the output


def wait_ghost(x: XSession, daemon: Daemon, before: int, within: float = 10) -> int:
    """Wait until a new ghost was painted and is mapped; its window."""
    wait_until(lambda: painted(daemon) > before, within, "the ghost text to be painted")
    return wait_until(lambda: (ghost_windows(x) or [0])[0], 5, "the ghost window")


def painted(daemon: Daemon) -> int:
    """How many suggestions were shown (ghosts opened and painted)."""
    return len(set(_painted_ids(daemon)))


def _painted_ids(daemon: Daemon) -> list[str]:
    return [
        line.split("ghost ", 1)[1].split(" ", 1)[0]
        for line in daemon.log().splitlines()
        if " painted " in line and "ghost " in line
    ]


def input_rectangles(x: XSession, wid: int) -> list[tuple[int, int, int, int]]:
    """The window's input region as the X server has it (SHAPE extension)."""
    from Xlib import display
    from Xlib.ext import shape

    conn = display.Display(x.display)
    try:
        window = conn.create_resource_object("window", wid)
        reply = window.shape_get_rectangles(shape.SK.Input)
        return [(r.x, r.y, r.width, r.height) for r in reply.rectangles]
    finally:
        conn.close()


def asked_since(server: LoopbackServer, count: int) -> list[str]:
    """The end of each request's prefix after the first ``count`` requests: what the
    field held when it was asked (a failure then shows which edit asked)."""
    return [request.json()["input_prefix"][-24:] for request in infill(server)[count:]]


def type_burst(x: XSession, text: str) -> None:
    x.run("xdotool", "type", "--delay", str(TYPE_DELAY_MS), text, timeout=60)


@dataclass
class Field:
    """The Qt target as the user leaves it: text and caret."""

    text: str
    caret: int


def qt_field(qt: QtTarget) -> Field:
    state = qt.state()
    return Field(state["text"], state["caret"])


def start_in_qt(
    x: XSession, qt: QtTarget, text: str, responder: LlamaCpp, caret: int | None = None
) -> None:
    """The target holding ``text``, the caret at its end, nothing suggested."""

    def fill() -> None:
        qt.set(text, len(text) if caret is None else caret)
        x.focus(qt.wid)

    quiet(x, responder, fill)


def quiet(x: XSession, responder: LlamaCpp, fill: Callable[[], None]) -> None:
    """``fill`` the editor and focus it, then let it settle: filling it is a text change
    like typing, so a suggestion may follow it after the pause; it is let come (with the
    backend's default answer, the test's own kept for later) and dismissed, so the
    test's typing starts from a quiet field."""
    kept = list(responder.queue)
    responder.queue.clear()
    fill()
    x.set_clipboard(USER_CLIP)
    time.sleep(1.2)  # longer than the longest pause (1000 ms) and the stub's answer
    if ghost_windows(x):
        x.key("Escape", clear=False)
        wait_until(lambda: not ghost_windows(x), 5, "the ghost of the set text to go")
    responder.push(*kept)


def test_a_burst_asks_nothing_a_pause_shows_ghost_text_tab_inserts_it(
    a11y: XSession, suggesting: Daemon, qt: QtTarget, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text=" * r * r"))
    start_in_qt(a11y, qt, "def area(r):\n    return ", responder)
    asked, shown = len(infill(server)), painted(suggesting)
    type_burst(a11y, "3.14159")
    assert asked_since(server, asked) == []  # not one request while typing on
    wid = wait_ghost(a11y, suggesting, shown)
    assert len(infill(server)) == asked + 1
    sent = infill(server)[-1].json()
    assert sent["input_prefix"].endswith("return 3.14159")
    assert a11y.focused() == qt.wid  # the ghost never took the focus
    assert input_rectangles(a11y, wid) == []  # clicks go through to the editor
    if SCREENSHOTS:
        a11y.run("import", "-window", "root", str(Path(SCREENSHOTS) / "ghost-text-full.png"))
    this = _painted_ids(suggesting)[-1]
    a11y.key("Tab", clear=False)
    outcome = suggesting.wait_outcome(len(suggesting.outcomes()) + 1, within=15)
    assert (outcome.status, outcome.app) == ("inserted", "anyfill-suggest-target"), outcome
    done = "def area(r):\n    return 3.14159 * r * r"
    assert qt_field(qt) == Field(done, len(done))
    # this ghost is gone (after the pause that follows the insertion a new one may show)
    assert f"popup {this} closed: accepted" in suggesting.log()
    assert a11y.get_clipboard() == USER_CLIP


class Editor(Protocol):
    """An editor the suggestion cases run in, as the user leaves it."""

    app: str
    """Its window class, as anyfill's outcomes name it."""
    wid: int

    def start(self, text: str) -> None:
        """The editor holding ``text``, the caret at its end, focused, nothing suggested."""

    def text(self) -> str:
        """What the document holds now."""


class QtEditor:
    """The module's Qt target."""

    app = "anyfill-suggest-target"

    def __init__(self, x: XSession, qt: QtTarget, responder: LlamaCpp) -> None:
        self.x, self.qt, self.responder, self.wid = x, qt, responder, qt.wid

    def start(self, text: str) -> None:
        start_in_qt(self.x, self.qt, text, self.responder)

    def text(self) -> str:
        return qt_field(self.qt).text


class MousepadEditor:
    """Mousepad (GTK 3) on a file of its own; the document is read by saving it."""

    app = "Mousepad"

    def __init__(self, x: XSession, responder: LlamaCpp) -> None:
        self.x, self.responder = x, responder
        self.path = x.workdir / f"suggest-{next(_documents)}.txt"
        self.process: subprocess.Popen[bytes] | None = None
        self.wid = 0

    def start(self, text: str) -> None:
        # A final line break of its own, as files have (Mousepad keeps it as it is).
        self.path.write_text(text + "\n", encoding="utf-8")
        line, column = text.count("\n") + 1, len(text.rsplit("\n", 1)[-1])
        place = [f"--line={line}", f"--column={column}"]

        def fill() -> None:
            self.process = self.x.spawn(
                ["mousepad", "--disable-server", *place, str(self.path)], "mousepad.log"
            )
            self.wid = self.x.find_window("mousepad")
            self.x.focus(self.wid)
            # Type once the window shows the document with the caret in it (see there).
            wait_accessible(self.x, self.process.pid, 20, contains=text)

        quiet(self.x, self.responder, fill)

    def text(self) -> str:
        self.x.focus(self.wid)
        before = self.path.stat().st_mtime_ns
        self.x.key("ctrl+s")
        wait_until(lambda: self.path.stat().st_mtime_ns != before, 5, "Mousepad to save")
        return self.path.read_text(encoding="utf-8").removesuffix("\n")

    def close(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(10)


_documents = itertools.count(1)


@pytest.fixture(params=["qt", "mousepad"])
def editor(
    request: pytest.FixtureRequest, a11y: XSession, llama: tuple[LlamaCpp, LoopbackServer]
) -> Iterator[Editor]:
    """Each case in the Qt target and in Mousepad (GTK 3)."""
    # The previous case's window may still ask (the pause after its insertion): that
    # suggestion comes and goes now, before this case scripts the backend's answers.
    quiet(a11y, llama[0], lambda: None)
    if request.param == "qt":
        yield QtEditor(a11y, request.getfixturevalue("qt"), llama[0])
        return
    if shutil.which("mousepad") is None:
        pytest.skip("needs mousepad (Debian)")
    mousepad = MousepadEditor(a11y, llama[0])
    try:
        yield mousepad
    finally:
        mousepad.close()


def typed_through(daemon: Daemon) -> list[str]:
    """How many characters of a suggestion were left, each time the user typed through."""
    return re.findall(r"typed through: (\d+) characters", daemon.log())


def show_ghost(x: XSession, daemon: Daemon, editor: Editor, start: str, typed: str) -> int:
    """Type ``typed`` after ``start`` in ``editor`` and wait for the ghost; its window."""
    editor.start(start)
    shown = painted(daemon)
    type_burst(x, typed)
    return wait_ghost(x, daemon, shown)


def test_esc_dismisses_and_typing_on_dismisses_and_reaches_the_editor(
    a11y: XSession, suggesting: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _server = llama
    answer_next(responder, Reply(text="World!"), Reply(text="zzz"))
    show_ghost(a11y, suggesting, editor, "print(", "'Hello ")
    before = len(suggesting.outcomes())
    a11y.key("Escape", clear=False)
    wait_until(lambda: not ghost_windows(a11y), 5, "the ghost to go")
    assert editor.text() == "print('Hello "  # Esc did not reach the editor as text
    assert len(suggesting.outcomes()) == before  # nothing inserted
    shown = painted(suggesting)
    a11y.key("x", clear=False)  # typing again: the next pause asks again
    wait_ghost(a11y, suggesting, shown)
    this = _painted_ids(suggesting)[-1]
    a11y.key("y", clear=False)  # not what the ghost says
    # this ghost goes (after the pause that follows "y" a new one may show)
    wait_until(lambda: f"popup {this} closed: typing" in suggesting.log(), 5, "the ghost to go")
    # anyfill may see the key before the editor has handled it
    wait_until(lambda: editor.text() == "print('Hello xy", 5, "the 'y' in the editor")
    assert len(suggesting.outcomes()) == before


def test_type_through_shows_the_rest_without_a_new_request(
    a11y: XSession, suggesting: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text="range(10):"))
    show_ghost(a11y, suggesting, editor, "for i in", " ")
    asked, shown = len(infill(server)), painted(suggesting)
    since = len(typed_through(suggesting))
    a11y.key("r", "a", clear=False)
    wait_until(lambda: painted(suggesting) >= shown + 1, 5, "the rest to show")
    # "r" may show its rest before "a" comes: wait for what "ra" leaves
    wait_until(
        lambda: {"7", "8"} & set(typed_through(suggesting)[since:]), 5, "type-through of 'ra'"
    )
    assert len(infill(server)) == asked  # no new request
    before = len(suggesting.outcomes())
    wait_until(lambda: ghost_windows(a11y), 5, "the ghost of the rest")
    a11y.key("Tab", clear=False)
    outcome = suggesting.wait_outcome(before + 1, within=15)
    assert (outcome.status, outcome.app) == ("inserted", editor.app), outcome
    assert editor.text() == "for i in range(10):"


def test_a_focus_change_hides_the_ghost_and_inserts_nothing(
    a11y: XSession, suggesting: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _server = llama
    answer_next(responder, Reply(text="never inserted"))
    other = QtTarget(a11y, "anyfill-suggest-other")
    try:
        other.set("elsewhere", 9)
        show_ghost(a11y, suggesting, editor, "note:", " ")
        before = len(suggesting.outcomes())
        a11y.focus(other.wid)
        wait_until(lambda: not ghost_windows(a11y), 5, "the ghost to go")
        a11y.key("Tab", clear=False)  # the Tab now belongs to the other window
        assert "never" not in other.state()["text"]
        assert editor.text() == "note: "
        assert len(suggesting.outcomes()) == before
    finally:
        other.close()


@pytest.mark.skipif(shutil.which("mousepad") is None, reason="needs mousepad (Debian)")
def test_mousepad_a_pause_shows_ghost_text_and_tab_inserts_it(
    a11y: XSession, suggesting: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    path = a11y.workdir / "area.py"
    path.write_text("def area(r):\n    return \n", encoding="utf-8")
    opened: list[subprocess.Popen[bytes]] = []

    def open_area() -> None:
        opened.append(
            a11y.spawn(
                ["mousepad", "--disable-server", "--line=2", "--column=11", str(path)],
                "mousepad.log",
            )
        )
        a11y.focus(a11y.find_window("mousepad"))
        # As a user types once the window shows the document with the caret in it: under
        # load Mousepad maps its window before its text view has the focus and the file.
        wait_accessible(a11y, opened[0].pid, 20, contains="def area")

    try:
        # Opening the file is a text change and a caret move: a suggestion may follow it
        # (2 of 4 runs under two busy loops took the test's answer for it).
        quiet(a11y, responder, open_area)
        wid = a11y.focused()
        answer_next(responder, Reply(text=" * r * r"))
        asked, shown = len(infill(server)), painted(suggesting)
        type_burst(a11y, "3.14159")
        assert len(infill(server)) == asked
        ghost = wait_ghost(a11y, suggesting, shown)
        assert infill(server)[-1].json()["input_prefix"].endswith("return 3.14159")
        assert a11y.focused() == wid
        assert input_rectangles(a11y, ghost) == []
        if SCREENSHOTS:
            a11y.run("import", "-window", "root", str(Path(SCREENSHOTS) / "ghost-mousepad.png"))
        before = len(suggesting.outcomes())
        a11y.key("Tab", clear=False)
        outcome = suggesting.wait_outcome(before + 1, within=15)
        assert (outcome.status, outcome.app) == ("inserted", "Mousepad"), outcome
        wait_until(lambda: not ghost_windows(a11y), 5, "the ghost to go")
        a11y.key("ctrl+s")
        wait_until(
            lambda: path.read_text(encoding="utf-8") != "def area(r):\n    return \n",
            5,
            "Mousepad to save",
        )
        assert path.read_text(encoding="utf-8") == "def area(r):\n    return 3.14159 * r * r\n"
        assert a11y.get_clipboard() == USER_CLIP
    finally:
        for editor in opened:
            os.killpg(editor.pid, signal.SIGTERM)
            editor.wait(10)


@pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)
def test_chromium_with_its_accessibility_on_shows_and_inserts_a_suggestion(
    a11y: XSession, suggesting: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """Chromium sends the text events only with its accessibility forced on: the flag
    --force-renderer-accessibility and ACCESSIBILITY_ENABLED=1 (the flag alone sent none
    here)."""
    from tests.e2e.test_chromium import PAGE

    responder, server = llama
    answer_next(responder, Reply(text=" world"))
    accessible = page_windows(
        a11y,
        PAGE,
        "chromium-suggest",
        "--force-renderer-accessibility",
        env={"ACCESSIBILITY_ENABLED": "1"},
    )
    with accessible as open_page:
        page = open_page({"text": "", "caret": 0}, lambda state: "focused" in state)
        a11y.set_clipboard(USER_CLIP)
        asked, shown = len(infill(server)), painted(suggesting)
        type_burst(a11y, "hello")
        assert len(infill(server)) == asked
        wait_ghost(a11y, suggesting, shown, within=15)
        assert asked_since(server, asked) == ["hello"]
        try:
            wait_until(lambda: page.state.get("text") == "hello", 10, "the typed text")
        except TimeoutError:
            raise AssertionError(f"the page shows {page.state}") from None
        before = len(suggesting.outcomes())
        a11y.key("Tab", clear=False)
        outcome = suggesting.wait_outcome(before + 1, within=15)
        assert outcome.status in ("inserted", "sent"), outcome
        wait_until(lambda: page.state.get("text") == "hello world", 5, "the text")
        assert a11y.get_clipboard() == USER_CLIP


def test_text_after_the_caret_puts_the_suggestion_in_a_capsule_below_it(
    a11y: XSession, suggesting: Daemon, qt: QtTarget, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _server = llama
    answer_next(responder, Reply(text="name"))
    start_in_qt(a11y, qt, "print(user.)", responder, caret=11)
    shown = painted(suggesting)
    type_burst(a11y, "f")
    wid = wait_ghost(a11y, suggesting, shown)
    caret = suggesting.log().rsplit("opened at the caret CaretRect(", 1)[1].split(")", 1)[0]
    where = dict(part.strip().split("=") for part in caret.split(","))
    geometry = dict(
        line.split("=", 1)
        for line in a11y.run("xdotool", "getwindowgeometry", "--shell", str(wid)).split()
    )
    # below the caret's line, starting at the caret: the ")" after it stays visible
    assert int(geometry["Y"]) >= int(where["y"]) + int(where["height"])
    assert int(geometry["X"]) == int(where["x"])
    assert input_rectangles(a11y, wid) == []
    if SCREENSHOTS:
        a11y.run("import", "-window", "root", str(Path(SCREENSHOTS) / "ghost-capsule.png"))
    before = len(suggesting.outcomes())
    a11y.key("Tab", clear=False)
    outcome = suggesting.wait_outcome(before + 1, within=15)
    assert outcome.status == "inserted", outcome
    assert qt_field(qt).text == "print(user.fname)"
    assert a11y.get_clipboard() == USER_CLIP


def test_an_application_killed_while_its_suggestion_is_on_the_way_leaves_anyfill_running(
    a11y: XSession, suggesting: Daemon, qt: QtTarget, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """The listener reads fields over D-Bus, not libatspi: an app that goes away is an error
    on one call, never a crash (last session libatspi crashed when an app quit mid-capture);
    the next suggestion elsewhere shows as usual."""
    responder, server = llama
    answer_next(responder, Reply(text="later", delay_s=0.3), Reply(text=" again"))
    leaving = QtTarget(a11y, "anyfill-suggest-leaving")
    leaving.set("bye", 3)
    a11y.focus(leaving.wid)
    asked = len(infill(server))
    a11y.key("x", clear=False)
    wait_until(lambda: len(infill(server)) > asked, 10, "the suggestion's request")
    leaving.process.kill()  # gone while its suggestion is on the way
    leaving.process.wait(5)
    leaving.reader.close()
    leaving.sock.close()
    show_ghost(a11y, suggesting, QtEditor(a11y, qt, responder), "still", " here")
    assert suggesting.process.poll() is None

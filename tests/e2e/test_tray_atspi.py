"""The tray on an X11 desktop with an accessibility bus, as GNOME, KDE and Xfce run one:
a session bus, at-spi-bus-launcher, a tray host (trayer), Mousepad, `anyfill run` with the
tray. One completion per Mousepad window, the window closed, four times over: the tray
stays up, the user's CLIPBOARD stays readable, and every press captures over AT-SPI
(libatspi raced Qt's GLib dispatcher on the GUI thread: a segfault when an application
closed, the clipboard lost with the process; presses that stalled and fell back to the
keyboard).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, Outcome, XSession, daemon_config, wait_until
from tests.e2e.test_accessibility import MISSING, a11y  # noqa: F401 - the fixture
from tests.e2e.test_qt_target import USER_CLIP, answer_next, infill, press
from tests.e2e.test_tray import TRAYER
from tests.e2e.wayland import wait_accessible
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(MISSING), reason=f"accessibility tests need {MISSING}"),
    pytest.mark.skipif(
        shutil.which("mousepad") is None or shutil.which("trayer") is None,
        reason="needs mousepad and trayer (Debian; .ci/apt-packages.txt)",
    ),
]

WINDOWS = 4
ALIVE_S = 3.0
"""How long the tray must stay up after a window closed (the crash came within ~1 s)."""
_docs = itertools.count(1)


@pytest.fixture(scope="module")
def a11y_tray(a11y: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:  # noqa: F811
    host = a11y.spawn([*TRAYER, "--transparent", "true", "--alpha", "0"], "trayer.log")
    a11y.find_window("trayer")
    config = daemon_config(llama[1].url).replace('level = "INFO"', 'level = "DEBUG"')
    daemon = Daemon(a11y, config, name="tray-a11y", headless=False)
    try:
        yield daemon
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.stop(signal.SIGKILL)
        os.killpg(host.pid, signal.SIGTERM)
        host.wait(10)


@pytest.mark.parametrize("close", ["quit", "exit"])
def test_closing_an_app_completed_in_keeps_the_tray_and_the_clipboard(
    close: str,
    a11y: XSession,  # noqa: F811
    a11y_tray: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    """``quit``: the document saved, then Ctrl+Q; ``exit``: the program ends (SIGTERM)
    right after the completion landed."""
    outcomes = []
    for window in range(WINDOWS):
        outcomes.append(_complete_then_close(a11y, a11y_tray, llama, close))
        deadline = time.monotonic() + ALIVE_S
        while time.monotonic() < deadline:
            assert a11y_tray.process.poll() is None, (
                f"the tray died ({a11y_tray.process.returncode}) after window {window} closed:\n"
                + a11y_tray.log()[-3000:]
            )
            time.sleep(0.1)
        assert a11y.get_clipboard() == USER_CLIP, f"the clipboard after window {window} closed"

    # Every press read the text over AT-SPI: none stalled into the keyboard fallback.
    assert [o.capture for o in outcomes] == ["accessibility"] * WINDOWS, (
        f"{outcomes}\n{a11y_tray.log()[-6000:]}"
    )
    print("tray press ms with an AT-SPI bus:", [round(o.ms) for o in outcomes])


def _complete_then_close(
    a11y: XSession,  # noqa: F811
    tray: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    close: str,
) -> Outcome:
    responder, server = llama
    path = a11y.workdir / f"closing{next(_docs)}.txt"
    text = f"alpha beta {path.stem}\ngamma\n"
    path.write_text(text, encoding="utf-8")
    editor = a11y.spawn(
        ["mousepad", "--disable-server", "--line=1", "--column=6", str(path)], "mousepad.log"
    )
    try:
        a11y.focus(a11y.find_window("mousepad"))
        a11y.set_clipboard(USER_CLIP)
        answer_next(responder, Reply(text="big "))
        before = len(infill(server))

        outcome = press(a11y, tray)

        assert (outcome.status, outcome.app) == ("inserted", "Mousepad"), (
            f"{outcome}\n{tray.log()[-3000:]}"
        )
        sent = infill(server)[before:]
        assert [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in sent] == [
            (text[:6], text[6:])
        ]
        wait_until(lambda: a11y.get_clipboard() == USER_CLIP, 5, "the user's clipboard back")
        if close == "quit":
            assert _saved(a11y, path) == text[:6] + "big " + text[6:]
            a11y.key("ctrl+q")
            wait_until(lambda: editor.poll() is not None, 10, "Mousepad to close")
        return outcome
    finally:
        if editor.poll() is None:
            os.killpg(editor.pid, signal.SIGTERM)
            editor.wait(10)


def _saved(x: XSession, path: Path) -> str:
    before = path.stat().st_mtime_ns
    x.key("ctrl+s")
    wait_until(lambda: path.stat().st_mtime_ns != before, 5, "Mousepad to save")
    return path.read_text(encoding="utf-8")


def test_each_window_of_one_mousepad_instance_takes_its_completion(
    a11y: XSession,  # noqa: F811
    a11y_tray: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    """Mousepad as users run it, one instance: each new window opens in it (the 2nd-4th
    windows' presses failed with "the application did not fetch the pasted text")."""
    responder, _server = llama
    outcomes = []
    launched: list[subprocess.Popen[bytes]] = []
    try:
        for window in range(WINDOWS):
            path = a11y.workdir / f"instance{next(_docs)}.txt"
            text = f"alpha beta {path.stem}\ngamma\n"
            path.write_text(text, encoding="utf-8")
            known = set(_mousepad_windows(a11y))
            # The first one is the instance; the others hand their file to it and exit.
            launched.append(
                a11y.spawn(
                    ["mousepad", "--opening-mode=window", "--line=1", "--column=6", str(path)],
                    "mousepad.log",
                )
            )
            wid = wait_until(lambda k=known: _new_window(a11y, k), 20, "a new Mousepad window")
            a11y.focus(wid)
            # As a user presses once the window shows its document with the caret in it:
            # under load a new window of the instance maps (and answers pings) before its
            # text view has the focus and the file's text.
            pid = int(a11y.run("xdotool", "getwindowpid", str(wid)).strip())
            wait_accessible(a11y, pid, 20, contains=path.stem)
            a11y.set_clipboard(USER_CLIP)
            answer_next(responder, Reply(text="big "))

            outcome = press(a11y, a11y_tray)
            outcomes.append(outcome)

            assert (outcome.status, outcome.capture) == ("inserted", "accessibility"), (
                f"window {window}: {outcome}\n{a11y_tray.log()[-3000:]}"
            )
            wait_until(lambda: a11y.get_clipboard() == USER_CLIP, 5, "the user's clipboard back")
            assert _saved(a11y, path) == text[:6] + "big " + text[6:]
    finally:
        for process in launched:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
    assert a11y_tray.process.poll() is None
    print("tray press ms, one Mousepad instance:", [round(o.ms) for o in outcomes])


def _mousepad_windows(x: XSession) -> list[int]:
    out = x.run("xdotool", "search", "--onlyvisible", "--class", "mousepad", check=False)
    return [int(w) for w in out.split()]


def _new_window(x: XSession, known: set[int]) -> int:
    fresh = [w for w in _mousepad_windows(x) if w not in known]
    return fresh[0] if fresh else 0


SHOWN_AT = re.compile(r"popup (\d+) shown at \((-?\d+), (-?\d+)\)")


def test_the_preview_popup_opens_at_the_caret_not_at_the_pointer(
    a11y: XSession,  # noqa: F811
    a11y_tray: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    """The caret's place comes from the AT-SPI capture; a capture that stalled and fell
    back to the keyboard put the popup at the pointer instead."""
    responder, _server = llama
    for attempt in range(3):  # each in a new window: the first AT-SPI question to it
        path = a11y.workdir / f"popup{next(_docs)}.txt"
        path.write_text("alpha beta gamma\ndelta\n", encoding="utf-8")
        editor = a11y.spawn(
            ["mousepad", "--disable-server", "--line=1", "--column=6", str(path)], "mousepad.log"
        )
        try:
            wid = a11y.find_window("mousepad")
            a11y.focus(wid)
            a11y.run("xdotool", "mousemove", "1250", "780")  # far from the caret
            answer_next(responder, Reply(text="big "))
            shown = len(SHOWN_AT.findall(a11y_tray.log()))
            read = a11y_tray.log().count("captured by accessibility")
            before = len(a11y_tray.outcomes())
            a11y.key("ctrl+alt+Return")
            wait_until(lambda n=shown: len(SHOWN_AT.findall(a11y_tray.log())) > n, 10, "the popup")
            _, x, y = SHOWN_AT.findall(a11y_tray.log())[-1]
            window = _geometry(a11y, wid)
            a11y.key("Escape", clear=False)
            assert a11y_tray.wait_outcome(before + 1, within=10).status == "dismissed"
            seen = f"attempt {attempt}: popup at {x},{y}, window at {window}\n"
            # Below line 1 of the document, near column 6: inside the window's top part.
            assert window[0] <= int(x) <= window[0] + 400, seen + a11y_tray.log()[-2500:]
            assert window[1] <= int(y) <= window[1] + 250, seen + a11y_tray.log()[-2500:]
            read_by = a11y_tray.log().count("captured by accessibility") - read
            assert read_by == 1, seen + a11y_tray.log()[-2500:]
        finally:
            os.killpg(editor.pid, signal.SIGTERM)
            editor.wait(10)


def _geometry(x: XSession, wid: int) -> tuple[int, int]:
    out = x.run("xdotool", "getwindowgeometry", "--shell", str(wid))
    values = dict(line.split("=", 1) for line in out.split() if "=" in line)
    return int(values["X"]), int(values["Y"])

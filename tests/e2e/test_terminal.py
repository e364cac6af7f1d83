"""A terminal (xterm from Debian): the default rule uses clipboard mode, never keys.

Inside xterm runs a recorder that writes every byte the terminal sends to the program:
Ctrl+C would arrive as \\x03, a paste as text. The test checks it stays empty, and then
that it does record a key we press, so the check can fail.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests.e2e.harness import Daemon, XSession, wait_until
from tests.e2e.test_qt_target import USER_CLIP, USER_PRIMARY, answer_next, infill, press
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

RECORDER = """
import os, sys, tty
if len(sys.argv) > 3:
    print(sys.argv[3], flush=True)
tty.setraw(0)
with open(sys.argv[1], "ab", buffering=0) as out:
    open(sys.argv[2], "w").close()
    while True:
        out.write(os.read(0, 1024))
"""


@pytest.mark.skipif(not os.path.exists("/usr/bin/xterm"), reason="needs xterm (Debian: xterm)")
def test_terminal_gets_clipboard_mode_and_no_keys(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    received, ready = x.workdir / "tty.bytes", x.workdir / "tty.ready"
    script = x.workdir / "recorder.py"
    script.write_text(RECORDER)
    term = x.spawn(
        ["xterm", "-e", sys.executable, str(script), str(received), str(ready)], "xterm.log"
    )
    try:
        wid = x.find_window("xterm")
        wait_until(ready.exists, 10, "the recorder in xterm")
        x.focus(wid, exact=False)
        x.set_clipboard("SELECT * FROM users WHERE <|cursor|> LIMIT 1")
        x.set_clipboard(USER_PRIMARY, "primary")
        responder, server = llama
        answer_next(responder, Reply(text="id = 1"))
        before = len(infill(server))

        outcome = press(x, daemon)

        assert (outcome.status, outcome.capture) == ("clipboard", "clipboard"), outcome
        assert outcome.app == "XTerm"
        sent = infill(server)[before:]
        assert [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in sent] == [
            ("SELECT * FROM users WHERE ", " LIMIT 1")
        ]
        assert x.get_clipboard() == "SELECT * FROM users WHERE id = 1 LIMIT 1"
        assert x.get_clipboard("primary") == USER_PRIMARY
        assert received.read_bytes() == b""  # no Ctrl+C, no paste, no key at all
        x.key("q")
        wait_until(lambda: received.read_bytes() == b"q", 5, "the recorder to see a key")
    finally:
        os.killpg(term.pid, signal.SIGTERM)
        term.wait(10)


@pytest.mark.skipif(not os.path.exists("/usr/bin/xterm"), reason="needs xterm (Debian: xterm)")
def test_terminal_selection_with_the_marker_is_completed_in_primary(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """xterm puts a selection in PRIMARY only (it has no default key to copy to
    CLIPBOARD): the user triple-clicks a line holding the marker and presses the hotkey;
    the completed line is in PRIMARY for Shift+Insert, the user's CLIPBOARD untouched."""
    received, ready = x.workdir / "tty2.bytes", x.workdir / "tty2.ready"
    script = x.workdir / "recorder.py"
    script.write_text(RECORDER)
    line = "git commit -m '<|cursor|>' --amend"
    term = x.spawn(
        ["xterm", "-e", sys.executable, str(script), str(received), str(ready), line],
        "xterm2.log",
    )
    try:
        wid = x.find_window("xterm")
        wait_until(ready.exists, 10, "the recorder in xterm")
        x.focus(wid, exact=False)
        x.set_clipboard(USER_CLIP)
        x.set_clipboard(USER_PRIMARY, "primary")
        x.run("xdotool", "mousemove", "--window", str(wid), "20", "8")
        x.run("xdotool", "click", "--repeat", "3", "--delay", "50", "1")
        wait_until(lambda: (x.get_clipboard("primary") or "").strip() == line, 5, "the selection")
        responder, server = llama
        answer_next(responder, Reply(text="fix the parser"))
        before = len(infill(server))

        outcome = press(x, daemon)

        assert (outcome.status, outcome.capture) == ("clipboard", "clipboard"), outcome
        sent = infill(server)[before:]
        assert [
            (r.json()["input_prefix"], r.json()["input_suffix"].rstrip("\n")) for r in sent
        ] == [("git commit -m '", "' --amend")]
        completed = (x.get_clipboard("primary") or "").rstrip("\n")
        assert completed == "git commit -m 'fix the parser' --amend"
        assert x.get_clipboard() == USER_CLIP  # the clipboard was not the source: untouched
        assert received.read_bytes() == b""  # nothing typed or pasted into the terminal
    finally:
        os.killpg(term.pid, signal.SIGTERM)
        term.wait(10)

"""`anyfill run` with the tray, for real: a tray host from Debian (trayer), Mousepad, the
preview hotkey pressed with xdotool, the loopback llama.cpp responder streaming.

Checks what the user sees and gets: the popup is mapped while the editor keeps the
focus, Tab inserts the streamed completion (document saved and read back, clipboard
restored), Esc leaves the document alone and closes the HTTP stream, Tab with nothing to
accept still types a tab, and the tray icon shows each state's colour in the tray host.

``ANYFILL_SCREENSHOTS=DIR`` also saves the pictures of the README into DIR.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, Outcome, XSession, daemon_config, wait_until
from tests.e2e.test_qt_target import USER_CLIP, answer_next
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(
        shutil.which("mousepad") is None or shutil.which("trayer") is None,
        reason="needs mousepad and trayer (Debian; .ci/apt-packages.txt)",
    ),
]

# Keys of their own: the session's headless daemon may hold the default hotkeys.
PREVIEW = "ctrl+alt+p"
OWN_KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+o"
preview = "<ctrl>+<alt>+p"
cancel = "<ctrl>+<alt>+j"
"""
DOCUMENT = ("def area(r):", "    return ", "", "print(area(2))")
CARET_LINE, CARET_COLUMN = 2, 11
TRAYER = ("trayer", "--edge", "top", "--align", "right", "--widthtype", "request", "--height", "32")
MOUSEPAD = ("mousepad", "--disable-server")
SCREENSHOTS = os.environ.get("ANYFILL_SCREENSHOTS", "")
_docs = itertools.count(1)


@dataclass
class Editor:
    path: Path
    wid: int
    process: subprocess.Popen[bytes]
    text: str

    def saved(self, x: XSession) -> str:
        """The document as saved after typing '|' at the caret (so it shows where the
        caret was, that no selection was left, and gives Mousepad a change to save)."""
        x.key("bar", clear=False)
        before = self.path.stat().st_mtime_ns
        x.key("ctrl+s")
        wait_until(lambda: self.path.stat().st_mtime_ns != before, 5, "Mousepad to save")
        return self.path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tray_host(x: XSession) -> Iterator[int]:
    host = x.spawn(
        [*TRAYER, "--tint", "0xe5e7eb", "--transparent", "true", "--alpha", "0"],
        "trayer.log",
    )
    window = x.find_window("trayer")
    yield window
    os.killpg(host.pid, signal.SIGTERM)
    host.wait(10)


@pytest.fixture(scope="module")
def tray(x: XSession, tray_host: int, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    extra = OWN_KEYS + '\n[logging]\nlevel = "DEBUG"\nfile = false\n'
    config = daemon_config(llama[1].url).replace('[logging]\nlevel = "INFO"\nfile = false\n', "")
    daemon = Daemon(x, config + extra, name="tray", headless=False)
    yield daemon
    assert daemon.stop() == 0
    assert "the core did not stop" not in daemon.log()


@pytest.fixture
def editor(x: XSession) -> Iterator[Editor]:
    path = x.workdir / f"area{next(_docs)}.py"
    text = "\n".join(DOCUMENT) + "\n"
    path.write_text(text, encoding="utf-8")
    process = x.spawn(
        [*MOUSEPAD, f"--line={CARET_LINE}", f"--column={CARET_COLUMN}", str(path)],
        "mousepad-tray.log",
    )
    wid = x.find_window("mousepad")
    x.focus(wid)
    x.set_clipboard(USER_CLIP)
    yield Editor(path, wid, process, text)
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(10)


def popup_visible(x: XSession) -> bool:
    out = x.run("xdotool", "search", "--onlyvisible", "--name", "anyfill preview", check=False)
    return bool(out.split())


def caret_offset() -> int:
    return sum(len(line) + 1 for line in DOCUMENT[: CARET_LINE - 1]) + CARET_COLUMN


def press_preview(x: XSession, tray: Daemon) -> int:
    """Press the preview hotkey; the number of popups shown so far once this one is up."""
    shown = tray.log().count(" shown at ")
    x.key(PREVIEW)
    wait_until(lambda: tray.log().count(" shown at ") > shown, 10, "the popup to open")
    wait_until(lambda: popup_visible(x), 15, "the popup window to be mapped")
    return shown + 1


def next_outcome(tray: Daemon, before: int) -> Outcome:
    return tray.wait_outcome(before + 1, within=15)


def test_tab_inserts_the_streamed_completion_and_the_focus_never_moves(
    x: XSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _server = llama
    answer_next(responder, Reply(text="3.14159 * r * r", chunk_delay_s=0.05))
    before = len(tray.outcomes())
    press_preview(x, tray)
    # Streamed: several partial texts reach the popup before the final one.
    wait_until(lambda: " characters (final)" in tray.log(), 10, "the final text in the popup")
    partial_updates = tray.log().count(" characters\n")
    assert partial_updates >= 2, tray.log()[-2000:]
    assert x.focused() == editor.wid  # the popup never took the focus
    if SCREENSHOTS:
        x.run("import", "-window", "root", str(Path(SCREENSHOTS) / "preview-popup-full.png"))

    x.key("Tab", clear=False)
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.app) == ("inserted", "Mousepad"), outcome
    assert not popup_visible(x)
    wait_until(lambda: x.get_clipboard() == USER_CLIP, 5, "the user's clipboard back")
    caret = caret_offset()
    assert editor.saved(x) == editor.text[:caret] + "3.14159 * r * r|" + editor.text[caret:]


def test_esc_closes_the_stream_and_leaves_the_document_alone(
    x: XSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text="x" * 40, chunks=["x"] * 40, chunk_delay_s=0.1))
    before, closed = len(tray.outcomes()), len(server.disconnects)
    press_preview(x, tray)
    wait_until(lambda: " characters\n" in tray.log().rsplit(" shown at ", 1)[1], 10, "text")
    x.key("Escape", clear=False)
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.reason) == ("dismissed", "dismissed"), outcome
    wait_until(lambda: len(server.disconnects) > closed, 5, "the HTTP stream to close")
    assert server.disconnects[-1].chunks_sent < 40
    assert not popup_visible(x)
    caret = caret_offset()
    assert editor.saved(x) == editor.text[:caret] + "|" + editor.text[caret:]


def test_tab_with_nothing_to_accept_still_reaches_the_editor(
    x: XSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _server = llama
    answer_next(responder, Reply(text="late", delay_s=3.0))
    before = len(tray.outcomes())
    press_preview(x, tray)
    x.key("Tab", clear=False)  # "thinking…": nothing to accept yet
    outcome = next_outcome(tray, before)
    assert outcome.status == "dismissed"
    assert "went to the application" in outcome.reason
    caret = caret_offset()
    assert editor.saved(x) == editor.text[:caret] + "\t|" + editor.text[caret:]


def test_a_held_tab_with_nothing_to_accept_reaches_the_editor_once_let_go(
    x: XSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """The user holds Tab while the popup is "thinking…": it is handed to the editor when
    let go (a replay while the key is still down was dropped by X: the tab was lost)."""
    responder, _server = llama
    answer_next(responder, Reply(text="late", delay_s=3.0))
    before = len(tray.outcomes())
    press_preview(x, tray)
    x.run("xdotool", "keydown", "Tab")
    try:
        wait_until(lambda: not popup_visible(x), 5, "the popup to close")
        assert len(tray.outcomes()) == before  # still waiting for the key to be let go
    finally:
        x.run("xdotool", "keyup", "Tab")
    outcome = next_outcome(tray, before)
    assert outcome.status == "dismissed"
    assert "went to the application" in outcome.reason
    caret = caret_offset()
    assert editor.saved(x) == editor.text[:caret] + "\t|" + editor.text[caret:]


def test_typing_in_the_editor_closes_the_popup(
    x: XSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _server = llama
    answer_next(responder, Reply(text="never shown", delay_s=3.0))
    before = len(tray.outcomes())
    press_preview(x, tray)
    x.key("a", clear=False)
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.reason) == ("dismissed", "typing")
    assert not popup_visible(x)
    caret = caret_offset()
    assert editor.saved(x) == editor.text[:caret] + "a|" + editor.text[caret:]


def pixel(x: XSession, at: tuple[int, int]) -> tuple[int, int, int]:
    out = x.run("import", "-window", "root", "-crop", f"1x1+{at[0]}+{at[1]}", "txt:-")
    header, last = out.splitlines()[0], out.splitlines()[-1]
    scale = 255 / float(header.split(":", 1)[1].split(",")[2])  # 255 or 65535 per channel
    rgb = last.split("(", 1)[1].split(")", 1)[0].split(",")[:3]
    red, green, blue = (round(float(value) * scale) for value in rgb)
    return red, green, blue


def tray_icon_spots(x: XSession, host: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The centre of the (only) icon in the tray host, and a point of its coloured square
    that no state's glyph covers (a fifth of the way in from the top-left corner)."""
    out = x.run("xdotool", "getwindowgeometry", "--shell", str(host))
    geometry = dict(line.split("=", 1) for line in out.split())
    left, top = int(geometry["X"]), int(geometry["Y"])
    width, height = int(geometry["WIDTH"]), int(geometry["HEIGHT"])
    icon = min(width, height) - 2
    x0, y0 = left + (width - icon) // 2, top + (height - icon) // 2
    return (left + width // 2, top + height // 2), (x0 + icon // 5, y0 + icon // 5)


def said(tray: Daemon) -> str:
    """The daemon's last log lines, less the popup's drawing of each piece of text."""
    return "\n".join(e for e in tray.log().splitlines()[-400:] if " characters" not in e)


# A line far wider than the screen, judged prose (nothing of code in its last 400
# characters) and judged code; each popup's text is drawn in a font of its own.
LONG_LINES = {
    "prose": (
        "Notes: "
        + " and then ".join(f"the weight of stone {n} times its value" for n in range(25)),
        "".join(f" and the bias of stone {n}" for n in range(30)),
    ),
    "code": (
        "    total = " + " + ".join(f"weight({n}) * value({n})" for n in range(40)),
        " + ".join(f"bias({n})" for n in range(30)),
    ),
}


@pytest.mark.parametrize("kind", sorted(LONG_LINES))
def test_a_long_line_keeps_the_popup_within_its_share_of_the_screen(
    x: XSession, tray: Daemon, llama: tuple[LlamaCpp, LoopbackServer], kind: str
) -> None:
    """On a real X server the popup over a very long line was 879 px wide on a 1280 px
    screen (the bound is 60 %, 768 px) and ran off its right edge: the lines were measured
    in the prose font and drawn in a monospace one."""
    from anyfill.ui.popup import MAX_WIDTH_FRACTION

    line, completion = LONG_LINES[kind]
    path = x.workdir / f"long{next(_docs)}.txt"
    path.write_text(f"{line}\nend\n", encoding="utf-8")
    process = x.spawn([*MOUSEPAD, "--line=1", f"--column={len(line)}", str(path)], "long.log")
    try:
        wid = x.find_window("mousepad")
        x.run("xdotool", "windowsize", str(wid), "760", "420")
        x.run("xdotool", "windowmove", str(wid), "500", "70")  # the popup would run off
        x.focus(wid)
        # The caret at the end of line 1 for sure: once the file is in (its name in the
        # title), as Mousepad's --column put it, or at the start when it was placed early.
        name = lambda: x.run("xdotool", "getwindowname", str(wid), check=False)  # noqa: E731
        wait_until(lambda: path.name in name(), 10, "Mousepad to load the file")
        x.key("ctrl+Home", "End")
        responder, _server = llama
        answer_next(responder, Reply(text=completion, chunk_delay_s=0.01))
        before = len(tray.outcomes())
        finals = tray.log().count(" characters (final)")
        press_preview(x, tray)
        try:
            wait_until(lambda: tray.log().count(" characters (final)") > finals, 10, "answer")
        except TimeoutError:
            raise AssertionError(said(tray)) from None
        time.sleep(0.3)  # the last text drawn and the window resized
        popup = x.run("xdotool", "search", "--onlyvisible", "--name", "anyfill preview").split()
        out = x.run("xdotool", "getwindowgeometry", "--shell", popup[0])
        g = {k: int(v) for k, v in (f.split("=", 1) for f in out.split()) if k != "WINDOW"}
        if SCREENSHOTS:
            x.run("import", "-window", "root", str(Path(SCREENSHOTS) / f"long-{kind}.png"))
        assert g["WIDTH"] <= int(1280 * MAX_WIDTH_FRACTION), g
        assert g["WIDTH"] > 1280 * MAX_WIDTH_FRACTION * 0.8, g  # the room is used: it wraps
        assert g["X"] >= 0, g
        assert g["X"] + g["WIDTH"] <= 1280, g
        assert g["Y"] >= 0, g
        assert g["Y"] + g["HEIGHT"] <= 800, g
        x.key("Tab", clear=False)
        outcome = next_outcome(tray, before)
        assert (outcome.status, outcome.app) == ("inserted", "Mousepad"), outcome
        x.key("bar", clear=False)
        saved = path.stat().st_mtime_ns
        x.key("ctrl+s")
        wait_until(lambda: path.stat().st_mtime_ns != saved, 5, "Mousepad to save")
        text = path.read_text(encoding="utf-8")
        assert text == f"{line}{completion}|\nend\n", text[:200] + "\n" + said(tray)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def test_the_tray_icon_follows_the_state_and_its_menu_opens(
    x: XSession, tray: Daemon, tray_host: int, editor: Editor
) -> None:
    from anyfill.ui.icons import COLOURS

    centre, probe = tray_icon_spots(x, tray_host)

    seen: list[tuple[int, int, int]] = []

    def near(colour: str) -> bool:
        want = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        seen.append(pixel(x, probe))
        return all(abs(a - b) < 40 for a, b in zip(seen[-1], want, strict=True))

    try:
        wait_until(lambda: near(COLOURS["idle"]), 5, "the idle (blue) icon")
    except TimeoutError:
        raise AssertionError(f"the icon at {probe} shows {seen[-1]}") from None
    code, _ = tray.cli("pause")
    assert code == 0
    wait_until(lambda: near(COLOURS["paused"]), 5, "the paused (grey) icon")
    code, output = tray.cli("status")
    assert "paused" in output
    assert code == 0
    code, _ = tray.cli("resume")
    wait_until(lambda: near(COLOURS["idle"]), 5, "the idle icon again")

    x.run("xdotool", "mousemove", str(centre[0]), str(centre[1]), "click", "1")
    time.sleep(0.5)
    if SCREENSHOTS:
        shot = Path(SCREENSHOTS) / "tray-menu-full.png"
        x.run("import", "-window", "root", str(shot))
    x.key("Escape", clear=False)


def test_a_click_elsewhere_closes_the_popup_and_its_request(
    x: XSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text="y" * 30, chunks=["y"] * 30, chunk_delay_s=0.1))
    before, closed = len(tray.outcomes()), len(server.disconnects)
    press_preview(x, tray)
    x.run("xdotool", "mousemove", "900", "600", "click", "1")  # the desktop, not the editor
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.reason) == ("dismissed", "click"), outcome
    wait_until(lambda: len(server.disconnects) > closed, 5, "the HTTP stream to close")
    assert not popup_visible(x)
    caret = caret_offset()
    assert editor.saved(x) == editor.text[:caret] + "|" + editor.text[caret:]


def test_a_second_run_hands_over_to_the_running_tray(x: XSession, tray: Daemon) -> None:
    second = Daemon(
        x,
        tray.config_path.read_text(),
        name="second-tray",
        runtime_dir=tray.runtime_dir,
        wait=False,
        headless=False,
    )
    assert second.process.wait(30) == 0
    assert "anyfill is already running: opened its settings instead" in second.log()
    wait_until(
        lambda: f"opening the settings window for {tray.config_path}" in tray.log(), 5, "settings"
    )
    code, output = tray.cli("status", "--json")
    assert code == 0
    assert json.loads(output)["sections"]["tray"] == {"icon": True, "host": True}


HOLDER = """
import sys, time
from Xlib import X, XK, display
d = display.Display()
code = d.keysym_to_keycode(XK.string_to_keysym("k"))
for lock in (0, X.LockMask, X.Mod2Mask, X.LockMask | X.Mod2Mask):
    d.screen().root.grab_key(code, X.ControlMask | X.Mod1Mask | lock, False,
                             X.GrabModeAsync, X.GrabModeAsync)
d.sync()
print("holding", flush=True)
time.sleep(60)
"""


def test_a_hotkey_another_program_holds_is_notified_with_the_fix(
    x: XSession, tray_host: int, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    holder = x.spawn([sys.executable, "-c", HOLDER], "holder.log")
    try:
        wait_until(lambda: "holding" in (x.workdir / "holder.log").read_text(), 10, "the grab")
        keys = '[hotkeys]\ncomplete = "<ctrl>+<alt>+u"\npreview = "<ctrl>+<alt>+i"\n'
        config = daemon_config(llama[1].url) + keys + 'cancel = "<ctrl>+<alt>+k"\n'

        other = Daemon(x, config, name="held", headless=False)
        try:
            log = other.log()
            assert "hotkey <ctrl>+<alt>+k (cancel) is taken by another program" in log
            wait_until(
                lambda: "choose another combination in [hotkeys]" in other.log(), 5, "the notice"
            )
        finally:
            assert other.stop() == 0
    finally:
        os.killpg(holder.pid, signal.SIGTERM)
        holder.wait(10)


def test_diagnostics_see_the_running_tray_and_fit_the_screen(x: XSession, tray: Daemon) -> None:
    """The tray's Diagnostics always said "daemon ✗ did not answer within 2 s" (the doctor
    blocked the loop that serves the control socket), and opened 640x342 partly off-screen."""
    before = tray.log().count("diagnostics: ")
    code = "from anyfill.daemon.control.client import call; call('show-diagnostics')"
    subprocess.run([sys.executable, "-c", code], env=tray.env, check=True, timeout=20)
    wait_until(lambda: "diagnostics: ok daemon: " in tray.log()[-20000:], 30, "the checks")
    lines = [line for line in tray.log().splitlines() if "diagnostics: " in line][before:]
    daemon = next(line for line in lines if " daemon: " in line)
    assert "diagnostics: ok daemon: running (pid " in daemon, daemon
    assert ", tray)" in daemon
    window = wait_until(
        lambda: x.run(
            "xdotool", "search", "--onlyvisible", "--name", "anyfill diagnostics", check=False
        ).split(),
        10,
        "the window",
    )[0]
    out = x.run("xdotool", "getwindowgeometry", "--shell", window)
    g = {k: int(v) for k, v in (line.split("=", 1) for line in out.split()) if k != "WINDOW"}
    assert min(g["X"], g["Y"]) >= 0, g
    assert g["X"] + g["WIDTH"] <= 1280, g
    assert g["Y"] + g["HEIGHT"] <= 800, g
    assert g["WIDTH"] > 640, g
    x.run("xdotool", "windowclose", window, check=False)

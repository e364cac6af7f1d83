"""The preview popup on native Wayland, for real: sway headless, native Wayland Mousepad,
``anyfill run`` with its Qt side on the Wayland platform, the loopback llama.cpp responder.

What the user sees and gets: the popup is drawn on a layer surface at the caret (checked
against AT-SPI's caret plus sway's window position, and by the pixels sway composited,
read back with grim), Mousepad keeps the keyboard focus (sway's tree), Tab inserts the
streamed completion with the clipboard intact, Esc closes the HTTP stream and leaves the
document alone, a focus change or typing closes the popup, and once it is closed Tab types
a tab again and the user's own sway binding on a popup key still runs.

``ANYFILL_SCREENSHOTS=DIR`` also saves the picture of docs/wayland.md into DIR.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, Outcome, daemon_config, wait_until
from tests.e2e.test_qt_target import answer_next
from tests.e2e.wayland import UNUSABLE, Editor, WaylandSession, open_mousepad
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE),
    pytest.mark.skipif(shutil.which("grim") is None, reason="needs grim (.ci/apt-packages.txt)"),
]

USER_CLIP = "the user's clipboard ✓ (popup)"
DOCUMENT = ("def area(r):", "    return ", "", "print(area(2))")
CARET_LINE, CARET_COLUMN = 2, 11
WINDOW = (160, 120, 820, 460)
"""Mousepad floats here (x, y, width, height): the caret's window-relative position must
be moved by the window's place in the layout."""
USER_BINDING = "Mod1+bracketleft"
"""The user's own binding on a popup key (Alt+[ cycles back by default)."""
SCREENSHOTS = os.environ.get("ANYFILL_SCREENSHOTS", "")
SHOWN = re.compile(r"popup (\d+) shown at \((-?\d+), (-?\d+)\) on a layer surface")
CARET = """
import gi
gi.require_version("Atspi", "2.0")
from gi.repository import Atspi
desktop = Atspi.get_desktop(0)
def find(node, depth=0):
    if node is None or depth > 40:
        return None
    states = node.get_state_set()
    if states.contains(Atspi.StateType.FOCUSED) and "Text" in node.get_interfaces():
        return node
    for i in range(node.get_child_count()):
        found = find(node.get_child_at_index(i), depth + 1)
        if found is not None:
            return found
for i in range(desktop.get_child_count()):
    app = desktop.get_child_at_index(i)
    if app is not None and app.get_process_id() == {pid}:
        text = find(app)
        offset = Atspi.Text.get_caret_offset(text)
        box = Atspi.Text.get_character_extents(text, offset, Atspi.CoordType.WINDOW)
        print(box.x, box.y, box.width, box.height)
"""


@pytest.fixture(scope="module")
def wl() -> Iterator[WaylandSession]:
    binding = f'bindsym {USER_BINDING} exec touch "$HOME/popup-user-binding-ran"\n'
    with WaylandSession.start(binding) as session:
        yield session


@pytest.fixture(scope="module")
def tray(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    config = daemon_config(llama[1].url).replace('level = "INFO"', 'level = "DEBUG"')
    daemon = Daemon(wl, config, "anyfill-popup", headless=False)  # type: ignore[arg-type]
    yield daemon
    assert daemon.stop() == 0
    assert "the core did not stop" not in daemon.log()


@pytest.fixture
def editor(wl: WaylandSession) -> Iterator[Editor]:
    text = "\n".join(DOCUMENT) + "\n"
    opened = open_mousepad(wl, text, CARET_LINE, CARET_COLUMN)
    x, y, width, height = WINDOW
    wl.run(
        "swaymsg",
        f"[con_id={opened.con_id}] floating enable, resize set {width} {height}, "
        f"move absolute position {x} {y}",
    )
    wait_until(lambda: _rect(wl, opened.con_id)[:2] == (x, y), 5, "Mousepad to float in place")
    wl.set_clipboard(USER_CLIP)
    yield opened
    opened.close()


def _rect(wl: WaylandSession, con_id: int) -> tuple[int, int, int, int]:
    node = next(n for n in wl.windows() if n.get("id") == con_id)
    rect, inner = node["rect"], node["window_rect"]
    return rect["x"] + inner["x"], rect["y"] + inner["y"], inner["width"], inner["height"]


def caret_on_screen(wl: WaylandSession, editor: Editor) -> tuple[int, int, int, int]:
    """AT-SPI's caret (relative to the window on Wayland) plus the window's place."""
    out = wl.run(sys.executable, "-c", CARET.replace("{pid}", str(editor.process.pid)))
    x, y, width, height = (int(v) for v in out.split())
    left, top, _, _ = _rect(wl, editor.con_id)
    return left + x, top + y, width, height


def press_preview(wl: WaylandSession, tray: Daemon) -> tuple[int, int]:
    """Trigger the preview as a bound key would; the popup's top-left corner once shown."""
    shown = len(SHOWN.findall(tray.log()))
    code, out = tray.cli("trigger", "preview")
    assert code == 0, out
    wait_until(lambda: len(SHOWN.findall(tray.log())) > shown, 10, "the popup on its layer")
    _, x, y = SHOWN.findall(tray.log())[-1]
    return int(x), int(y)


def next_outcome(tray: Daemon, before: int) -> Outcome:
    return tray.wait_outcome(before + 1, within=15)


def screenshot(wl: WaylandSession, name: str) -> Path:
    path = Path(SCREENSHOTS) / name if SCREENSHOTS else wl.workdir / name
    wl.run("grim", str(path))
    return path


def pixel(path: Path, x: int, y: int) -> tuple[int, int, int]:
    from PySide6.QtGui import QImage

    colour = QImage(str(path)).pixelColor(x, y)
    return colour.red(), colour.green(), colour.blue()


def saved_with_mark(wl: WaylandSession, editor: Editor) -> str:
    """The document as saved after typing '|' at the caret."""
    wl.type_text("|")
    return wait_until(lambda: _with_mark(editor.save()), 5, "the typed mark in the document")


def _with_mark(saved: str) -> str:
    return saved if "|" in saved else ""


def tab_reaches_mousepad(wl: WaylandSession, editor: Editor) -> str:
    wl.run("wtype", "-k", "Tab")
    return saved_with_mark(wl, editor)


def caret_offset() -> int:
    return sum(len(line) + 1 for line in DOCUMENT[: CARET_LINE - 1]) + CARET_COLUMN


def test_the_popup_shows_at_the_caret_and_tab_inserts_the_completion(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _ = llama
    answer_next(responder, Reply(text="3.14159 * r * r", chunk_delay_s=0.05))
    before = len(tray.outcomes())
    caret = caret_on_screen(wl, editor)

    x, y = press_preview(wl, tray)

    # Below the caret (4 px gap), its left edge on the caret's.
    assert abs(x - caret[0]) <= 3, (x, y, caret)
    assert abs(y - (caret[1] + caret[3] + 4)) <= 3, (x, y, caret)
    wait_until(lambda: " characters (final)" in tray.log(), 10, "the final text in the popup")
    assert tray.log().count(" characters\n") >= 2  # streamed: partial texts came first
    assert wl.focused_window().get("id") == editor.con_id  # the popup never took the focus
    shot = screenshot(wl, "wayland-preview-popup-full.png")
    border, outside = pixel(shot, x, y + 12), pixel(shot, x - 3, y + 12)
    # The popup's grey border where the log says it is; Mousepad's white text area beside it.
    assert max(border) < 200, (border, outside)
    assert min(outside) > 230, (border, outside)

    wl.run("wtype", "-k", "Tab")
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.app) == ("inserted", "mousepad"), outcome
    assert wl.get_clipboard() == USER_CLIP
    expected = editor.path.read_text(encoding="utf-8")
    caret_at = caret_offset()
    assert saved_with_mark(wl, editor) == (
        expected[:caret_at] + "3.14159 * r * r|" + expected[caret_at:]
    )


def test_esc_closes_the_stream_and_the_keys_go_back_to_the_application(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text="x" * 40, chunks=["x"] * 40, chunk_delay_s=0.1))
    before, closed = len(tray.outcomes()), len(server.disconnects)
    press_preview(wl, tray)
    wait_until(lambda: " characters\n" in tray.log().rsplit(" shown at ", 1)[1], 10, "text")
    wl.run("wtype", "-k", "Escape")
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.reason) == ("dismissed", "dismissed"), outcome
    wait_until(lambda: len(server.disconnects) > closed, 5, "the HTTP stream to close")
    assert server.disconnects[-1].chunks_sent < 40
    assert not editor.modified()
    # No binding is left: Tab is Mousepad's again.
    text = editor.path.read_text(encoding="utf-8")
    assert (
        tab_reaches_mousepad(wl, editor) == text[: caret_offset()] + "\t|" + text[caret_offset() :]
    )
    assert "popup keys unbound in sway" in tray.log()


def test_a_focus_change_closes_the_popup(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    other = open_mousepad(wl, "another window\n", 1, 3, window=2)
    try:
        wl.focus(editor.con_id)
        responder, server = llama
        answer_next(responder, Reply(text="y" * 30, chunks=["y"] * 30, chunk_delay_s=0.1))
        before, closed = len(tray.outcomes()), len(server.disconnects)
        asked = len(server.requests)
        press_preview(wl, tray)
        wait_until(lambda: len(server.requests) > asked, 5, "the request to reach the backend")
        wl.focus(other.con_id)
        outcome = next_outcome(tray, before)
        assert (outcome.status, outcome.reason) == ("dismissed", "focus"), outcome
        wait_until(lambda: len(server.disconnects) > closed, 5, "the HTTP stream to close")
        assert not editor.modified()
        assert not other.modified()
    finally:
        other.close()


def test_tab_with_nothing_to_accept_yet_is_typed_into_the_application(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _ = llama
    answer_next(responder, Reply(text="late", delay_s=3.0))
    before = len(tray.outcomes())
    press_preview(wl, tray)
    wl.run("wtype", "-k", "Tab")  # "thinking…": sway hands it to us, we hand it back
    outcome = next_outcome(tray, before)
    assert outcome.status == "dismissed", outcome
    assert "went to the application" in outcome.reason
    text = editor.path.read_text(encoding="utf-8")
    caret = caret_offset()
    assert saved_with_mark(wl, editor) == text[:caret] + "\t|" + text[caret:]


def test_alt_bracket_asks_for_an_alternative_and_tab_inserts_it(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text="first"), Reply(text="second"))
    before, asked = len(tray.outcomes()), len(server.requests)
    press_preview(wl, tray)
    wait_until(lambda: " characters (final)" in tray.log().rsplit(" shown at ", 1)[1], 5, "text")
    wl.run("wtype", "-M", "alt", "-k", "bracketright", "-m", "alt")
    wait_until(lambda: len(server.requests) >= asked + 2, 5, "the alternative's request")
    wait_until(lambda: tray.log().count(" characters (final)") >= 2, 5, "the alternative")
    wl.run("wtype", "-k", "Tab")
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.chars) == ("inserted", len("second")), outcome
    text = editor.path.read_text(encoding="utf-8")
    caret = caret_offset()
    assert saved_with_mark(wl, editor) == text[:caret] + "second|" + text[caret:]


def test_typing_in_the_target_closes_the_popup(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, _ = llama
    answer_next(responder, Reply(text="never shown", delay_s=3.0))
    before = len(tray.outcomes())
    press_preview(wl, tray)
    wl.type_text("a")
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.reason) == ("dismissed", "typing"), outcome
    text = editor.path.read_text(encoding="utf-8")
    caret = caret_offset()
    assert saved_with_mark(wl, editor) == text[:caret] + "a|" + text[caret:]


def test_the_users_own_binding_on_a_popup_key_is_left_alone(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    marker = wl.workdir / "popup-user-binding-ran"
    responder, _ = llama
    answer_next(responder, Reply(text="kept", chunk_delay_s=0.05))
    before = len(tray.outcomes())
    press_preview(wl, tray)
    log = tray.log()
    assert f"the preview key {USER_BINDING} is bound in your sway config" in log
    bound = log.rsplit("popup keys bound in sway: ", 1)[1].split("\n", 1)[0].split(", ")
    assert "Mod1+bracketright" in bound, bound
    assert USER_BINDING not in bound, bound
    # The documented way around it, from any binding or a terminal.
    code, out = tray.cli("preview", "dismiss")
    assert code == 0, out
    outcome = next_outcome(tray, before)
    assert (outcome.status, outcome.reason) == ("dismissed", "dismissed"), outcome
    # The user's binding still runs (sway's working directory is the session's home).
    wl.run("wtype", "-M", "alt", "-k", "bracketleft", "-m", "alt")
    wait_until(marker.exists, 5, "the user's own Alt+[ binding to run")
    code, out = tray.cli("preview", "accept")
    assert code == 1
    assert "no preview is showing" in out


def test_doctor_names_the_popup_route(wl: WaylandSession, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[backends]]\nname = "x"\ntype = "llamacpp"\nurl = "http://127.0.0.1:9"\n'
        '[routing]\ndefault = ["x"]\n'
    )
    out = wl.run(
        sys.executable, "-m", "anyfill.daemon.cli", "--config", str(config), "doctor", check=False
    )
    popup = next(line for line in out.splitlines() if "preview popup" in line)
    assert popup.split()[0] == "ok", out
    assert "at the caret on a layer surface (wlr-layer-shell)" in popup
    assert "sway's IPC" in popup


def test_no_binding_is_left_behind_at_exit_or_after_a_crash(
    wl: WaylandSession, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    config = daemon_config(llama[1].url).replace('level = "INFO"', 'level = "DEBUG"')
    responder, _ = llama
    text = editor.path.read_text(encoding="utf-8")
    caret = caret_offset()

    # Stopped while the popup shows: its keys go with it.
    first = Daemon(wl, config, "anyfill-exit", headless=False)  # type: ignore[arg-type]
    answer_next(responder, Reply(text="late", delay_s=5.0))
    press_preview(wl, first)
    assert first.stop() == 0
    assert "popup keys unbound in sway" in first.log()
    wl.run("wtype", "-k", "Tab")

    # Killed while the popup shows: the keys stay bound in sway (Tab does nothing) until
    # the next start removes them, as written down.
    killed = Daemon(wl, config, "anyfill-killed", runtime_dir=first.runtime_dir, headless=False)  # type: ignore[arg-type]
    answer_next(responder, Reply(text="late", delay_s=5.0))
    press_preview(wl, killed)
    killed.stop(signal.SIGKILL)
    wl.run("wtype", "-k", "Tab")  # sway's leftover binding takes it: nothing typed
    again = Daemon(wl, config, "anyfill-again", runtime_dir=first.runtime_dir, headless=False)  # type: ignore[arg-type]
    try:
        assert "popup key binding(s) left in sway by a previous run" in again.log()
        assert tab_reaches_mousepad(wl, editor) == text[:caret] + "\t\t|" + text[caret:]
    finally:
        assert again.stop() == 0


FIXED = re.compile(r"popup (\d+) shown at the top of the screen, \((\d+), (\d+)\), on a layer")


@pytest.fixture(scope="module")
def keyless_tray(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """`anyfill run` where no compositor IPC is reachable (as on KDE or Hyprland): sway's
    socket is hidden from it, its layer shell is not."""
    env = {k: v for k, v in wl.env.items() if k != "SWAYSOCK"}
    config = daemon_config(llama[1].url).replace('level = "INFO"', 'level = "DEBUG"')
    daemon = Daemon(replace(wl, env=env), config, "anyfill-keyless", headless=False)  # type: ignore[arg-type]
    yield daemon
    assert daemon.stop() == 0


def test_without_compositor_ipc_the_popup_shows_at_the_top_and_the_shortcut_again_inserts(
    wl: WaylandSession,
    keyless_tray: Daemon,
    editor: Editor,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    assert "wayland preview popup: at the top of the screen on a layer surface" in (
        keyless_tray.log()
    )
    responder, server = llama
    answer_next(responder, Reply(text="3.14159 * r * r"))
    before = len(keyless_tray.outcomes())
    shown = len(FIXED.findall(keyless_tray.log()))
    code, out = keyless_tray.cli("trigger", "preview")
    assert code == 0, out
    wait_until(lambda: len(FIXED.findall(keyless_tray.log())) > shown, 10, "the popup")
    wait_until(lambda: " characters (final)" in keyless_tray.log(), 10, "the final text")
    _, width, height = (int(v) for v in FIXED.findall(keyless_tray.log())[-1])
    assert wl.focused_window().get("id") == editor.con_id
    shot = screenshot(wl, "wayland-preview-popup-fixed.png")
    left = (1280 - width) // 2  # centred by sway on its 1280 px wide output
    inside, above = pixel(shot, left + 4, 96 + 4), pixel(shot, left + 4, 96 - 4)
    assert min(inside) > 240, (inside, above)  # the popup's light background
    assert max(above) < 120, (inside, above)  # sway's dark desktop above it
    assert height > 20

    code, out = keyless_tray.cli("trigger", "preview")  # again: inserts
    assert code == 0, out
    outcome = next_outcome(keyless_tray, before)
    assert (outcome.status, outcome.app) == ("inserted", "mousepad"), outcome
    text = editor.path.read_text(encoding="utf-8")
    caret = caret_offset()
    assert saved_with_mark(wl, editor) == text[:caret] + "3.14159 * r * r|" + text[caret:]

    answer_next(responder, Reply(text="x" * 40, chunks=["x"] * 40, chunk_delay_s=0.1))
    before, closed, asked = (
        len(keyless_tray.outcomes()),
        len(server.disconnects),
        len(server.requests),
    )
    code, out = keyless_tray.cli("trigger", "preview")
    assert code == 0, out
    wait_until(lambda: len(server.requests) > asked, 5, "the request to reach the backend")
    code, out = keyless_tray.cli("trigger", "cancel")  # the cancel shortcut dismisses
    assert code == 0, out
    outcome = next_outcome(keyless_tray, before)
    assert outcome.status in ("cancelled", "dismissed"), outcome
    wait_until(lambda: len(server.disconnects) > closed, 5, "the HTTP stream to close")

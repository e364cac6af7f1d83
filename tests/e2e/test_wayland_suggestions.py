"""Suggestions as you type on native Wayland, for real: sway headless, native Wayland
Mousepad, ``anyfill run`` with its Qt side on Wayland. The ghost text shows on the layer
surface at the caret (its grey letters read back from sway's composited output with grim),
Mousepad keeps the focus, Tab comes through the sway binding taken while it shows and
inserts it, the clipboard kept.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.e2e.harness import Daemon, daemon_config, wait_until
from tests.e2e.test_qt_target import answer_next, infill
from tests.e2e.test_wayland_popup import (
    CARET_COLUMN,
    CARET_LINE,
    DOCUMENT,
    SHOWN,
    USER_CLIP,
    caret_offset,
    caret_on_screen,
    editor,
    pixel,
    saved_with_mark,
    screenshot,
    wl,
)
from tests.e2e.wayland import UNUSABLE, Editor, WaylandSession
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

__all__ = ["CARET_COLUMN", "CARET_LINE", "DOCUMENT", "editor", "wl"]

GHOST_ON_LAYER = " characters at "
"""The ghost's paint line; with the layer surface it ends in "on a layer surface"."""

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE),
    pytest.mark.skipif(shutil.which("wtype") is None, reason="needs wtype"),
]


@pytest.fixture(scope="module")
def tray(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    config = daemon_config(llama[1].url, "[suggestions]\nauto = true\n").replace(
        'level = "INFO"', 'level = "DEBUG"'
    )
    daemon = Daemon(wl, config, "anyfill-suggest-wl", headless=False)  # type: ignore[arg-type]
    wait_until(lambda: "listening to the focused" in daemon.log(), 10, "the listener")
    yield daemon
    assert daemon.stop() == 0


def test_a_pause_shows_the_suggestion_at_the_caret_and_tab_inserts_it(
    wl: WaylandSession, tray: Daemon, editor: Editor, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    answer_next(responder, Reply(text=" * r * r"))
    asked, shown = len(infill(server)), tray.log().count(GHOST_ON_LAYER)
    before = len(tray.outcomes())
    wl.type_text("3.14")
    wait_until(lambda: tray.log().count(GHOST_ON_LAYER) > shown, 10, "the ghost on its layer")
    caret = caret_on_screen(wl, editor)
    shot = screenshot(wl, "wayland-ghost-full.png")
    # grey letters right of the caret on its line, none of the popup's box
    greys = [
        pixel(shot, caret[0] + dx, caret[1] + dy)
        for dx in range(2, 60)
        for dy in range(2, caret[3] - 2)
    ]
    assert any(110 < max(p) < 200 and max(p) - min(p) < 12 for p in greys), caret
    assert SHOWN.findall(tray.log()) == []  # not the popup
    assert len(infill(server)) == asked + 1
    assert infill(server)[-1].json()["input_prefix"].endswith("return 3.14")
    assert wl.focused_window().get("id") == editor.con_id
    wl.run("wtype", "-k", "Tab")
    outcome = tray.wait_outcome(before + 1, within=15)
    assert (outcome.status, outcome.app) == ("inserted", "mousepad"), outcome
    assert wl.get_clipboard() == USER_CLIP
    expected = editor.path.read_text(encoding="utf-8")
    at = caret_offset()
    assert saved_with_mark(wl, editor) == expected[:at] + "3.14 * r * r|" + expected[at:]

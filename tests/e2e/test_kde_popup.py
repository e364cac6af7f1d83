"""The preview popup on KDE Plasma (KWin 5.27 headless): at the caret.

The daemon learns where the focused window is from its KWin script and adds AT-SPI's
window-relative caret. The test checks the popup where KWin itself has put it: a KWin
script of the test's own lists KWin's windows, the popup's layer surface among them (its
``frameGeometry`` is where KWin composites it), independent of what the daemon logs.
The editor has KWin's Breeze title bar (server-side, outside its surface), as in a Plasma
session, so the caret is counted from the surface (``bufferGeometry``), not the frame.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import Daemon, QtTarget, daemon_config, wait_until
from tests.e2e.kde import UNUSABLE, KdeSession
from tests.e2e.test_wayland_popup import CARET
from tests.e2e.wayland import wait_accessible
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]

WINDOW = (420, 260)
"""Where the editor is moved (x, y): away from the output's top, where the popup shows
when anyfill does not know the window's place."""

_ALL_WINDOWS = (
    "const all = workspace.windowList ? workspace.windowList() : workspace.clientList();\n"
)


@pytest.fixture(scope="module")
def kde() -> Iterator[KdeSession]:
    with KdeSession.start() as session:
        yield session


@pytest.fixture(scope="module")
def tray(kde: KdeSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    config = daemon_config(llama[1].url).replace('level = "INFO"', 'level = "DEBUG"')
    daemon = Daemon(kde, config, "anyfill-kde-popup", runtime_dir=kde.run_dir, headless=False)  # type: ignore[arg-type]
    yield daemon
    assert daemon.stop() == 0


def kwin_windows(kde: KdeSession) -> list[dict[str, Any]]:
    """Every window KWin manages, layer surfaces included, with its place on screen."""
    lines = kde.script(
        _ALL_WINDOWS + "for (const w of all) { const g = w.frameGeometry; say(JSON.stringify({"
        "id: String(w.internalId), caption: String(w.caption), pid: w.pid,"
        " x: g.x, y: g.y, width: g.width, height: g.height,"
        " surface: [w.bufferGeometry.x, w.bufferGeometry.y],"
        " active: w === (workspace.activeWindow !== undefined ? workspace.activeWindow"
        " : workspace.activeClient)})); }"
    )
    return [json.loads(line) for line in lines]


def move(kde: KdeSession, window_id: str, x: int, y: int) -> None:
    kde.script(
        _ALL_WINDOWS + f"for (const w of all) if (String(w.internalId) === {json.dumps(window_id)})"
        f" {{ const g = w.frameGeometry; w.frameGeometry = {{x: {x}, y: {y},"
        " width: g.width, height: g.height}; }"
    )


def caret_in_window(kde: KdeSession, pid: int) -> tuple[int, int, int, int]:
    out = kde.run(sys.executable, "-c", CARET.replace("{pid}", str(pid)))
    x, y, width, height = (int(v) for v in out.split())
    return x, y, width, height


def test_the_popup_shows_at_the_caret_on_kwin_and_the_shortcut_again_inserts(
    kde: KdeSession, tray: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    log = tray.log()
    assert "wayland preview popup: at the caret (the window's place from KWin" in log, log
    known = {w["id"] for w in kwin_windows(kde)}
    target = QtTarget(kde, "anyfill-kde-popup-target")  # type: ignore[arg-type]
    try:
        window = kde.wait_new_active(known, "the Qt editor")
        move(kde, window["id"], *WINDOW)
        wait_until(
            lambda: next(w for w in kwin_windows(kde) if w["id"] == window["id"])["x"] == WINDOW[0],
            5,
            "the editor to move",
        )
        target.set("def area(r):\n    return \n", 24)
        wait_accessible(kde, int(window["pid"]))
        cx, cy, _, ch = caret_in_window(kde, int(window["pid"]))
        placed = next(w for w in kwin_windows(kde) if w["id"] == window["id"])
        surface_x, surface_y = placed["surface"]
        assert surface_y - placed["y"] >= 20, placed  # Breeze's title bar above the surface
        caret = (surface_x + cx, surface_y + cy)

        llama[0].queue.clear()
        llama[0].push(Reply(text="3.14159 * r * r"))
        before = len(tray.outcomes())
        code, out = tray.cli("trigger", "preview")
        assert code == 0, out
        wait_until(lambda: " characters (final)" in tray.log(), 10, "the final text")

        def popup() -> dict[str, Any] | None:
            return next(
                (w for w in kwin_windows(kde) if w["pid"] == tray.process.pid and w["width"]),
                None,
            )

        shown = wait_until(popup, 10, "the popup's layer surface in KWin")
        # Below the caret (4 px gap), its left edge on the caret's.
        assert abs(shown["x"] - caret[0]) <= 3, (shown, caret)
        assert abs(shown["y"] - (caret[1] + ch + 4)) <= 3, (shown, caret)
        assert kde.active_window()["id"] == window["id"]  # the editor keeps the focus

        code, out = tray.cli("trigger", "preview")  # again: inserts
        assert code == 0, out
        outcome = tray.wait_outcome(before + 1, within=15)
        assert outcome.status == "inserted", outcome
        state = target.state()
        assert state["text"] == "def area(r):\n    return 3.14159 * r * r\n", state
        wait_until(lambda: popup() is None, 5, "the popup to close")
    finally:
        target.close()

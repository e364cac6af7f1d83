"""Suggestions as you type on KDE Plasma (KWin 5.27 headless), for real: the Qt target's
text changes (set through its control socket: the harness has no keyboard on KWin), the
suggestion's ghost shows on the layer surface at the caret while the editor keeps the
focus, and, as KWin lets no key be taken, the completion shortcut pressed again inserts it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import Daemon, QtTarget, daemon_config, wait_until
from tests.e2e.kde import UNUSABLE, KdeSession
from tests.e2e.test_kde_popup import WINDOW, kde, kwin_windows, move
from tests.e2e.wayland import wait_accessible
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

__all__ = ["kde"]

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]


@pytest.fixture(scope="module")
def tray(kde: KdeSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    config = daemon_config(llama[1].url, "[suggestions]\nauto = true\n").replace(
        'level = "INFO"', 'level = "DEBUG"'
    )
    daemon = Daemon(kde, config, "anyfill-kde-suggest", runtime_dir=kde.run_dir, headless=False)  # type: ignore[arg-type]
    wait_until(lambda: "listening to the focused" in daemon.log(), 10, "the listener")
    yield daemon
    assert daemon.stop() == 0


def test_a_suggestion_shows_on_kwin_and_the_shortcut_again_inserts_it(
    kde: KdeSession, tray: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    known = {w["id"] for w in kwin_windows(kde)}
    target = QtTarget(kde, "anyfill-kde-suggest-target")  # type: ignore[arg-type]
    try:
        window = kde.wait_new_active(known, "the Qt editor")
        move(kde, window["id"], *WINDOW)
        wait_accessible(kde, int(window["pid"]))
        llama[0].queue.clear()
        llama[0].push(Reply(text=" * r * r"))
        before = len(tray.outcomes())
        text = "def area(r):\n    return 3.14159"
        target.set(text, len(text))  # a change, then a pause

        def ghost() -> dict[str, Any] | None:
            return next(
                (w for w in kwin_windows(kde) if w["pid"] == tray.process.pid and w["width"]),
                None,
            )

        wait_until(lambda: " on a layer surface" in tray.log(), 10, "the ghost on its layer")
        wait_until(ghost, 10, "the ghost's layer surface in KWin")
        assert kde.active_window()["id"] == window["id"]  # the editor keeps the focus
        code, out = tray.cli("trigger", "preview")  # no key on KWin: the shortcut again
        assert code == 0, out
        outcome = tray.wait_outcome(before + 1, within=15)
        assert outcome.status == "inserted", outcome
        assert target.state()["text"] == "def area(r):\n    return 3.14159 * r * r"
        wait_until(lambda: ghost() is None, 5, "the ghost to go")
    finally:
        target.close()

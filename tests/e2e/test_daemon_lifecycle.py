"""``anyfill run --headless`` starts, grabs its hotkeys, and stops cleanly on SIGINT/SIGTERM,
releasing the grabs; a hotkey another program holds is a clear error."""

from __future__ import annotations

import signal
import time

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

OWN_KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+u"
preview = "<ctrl>+<alt>+i"
cancel = "<ctrl>+<alt>+o"
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stops_cleanly_and_releases_its_hotkeys(
    sig: signal.Signals, x: XSession, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    config = daemon_config(llama[1].url, OWN_KEYS)
    first = Daemon(x, config, name=f"first-{sig.name}")

    assert first.stop(sig) == 0
    assert "anyfill stopped" in first.log()
    assert "Traceback" not in first.log()
    # The grabs are gone: another instance can take the same keys.
    second = Daemon(x, config, name=f"second-{sig.name}")
    assert second.stop() == 0


def test_hotkey_held_by_another_program_is_a_clear_error(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    # The session daemon holds the default hotkeys.
    with pytest.raises(RuntimeError, match="exited with 1") as info:
        Daemon(x, daemon_config(llama[1].url), name="clash")
    assert "hotkey <ctrl>+<alt>+<space> (complete) is taken by another program" in str(info.value)


def test_no_display_is_a_clear_error(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> None:
    del x.env["DISPLAY"]
    try:
        with pytest.raises(RuntimeError, match="exited with 1") as info:
            Daemon(x, daemon_config(llama[1].url), name="nodisplay")
    finally:
        x.env["DISPLAY"] = x.display
    assert "no X display: DISPLAY is not set" in str(info.value)


def test_display_going_away_stops_the_daemon_with_an_error(
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    with XSession.start() as doomed:
        process = Daemon(doomed, daemon_config(llama[1].url), name="doomed")
        doomed.process.kill()
        doomed.process.wait(10)
        assert process.process.wait(10) == 1
        assert "the connection to the display was lost" in process.log()


def test_clipboard_held_by_anyfill_survives_its_exit(
    x: XSession, qt: QtTarget, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """After a paste anyfill owns the restored clipboard; exiting must not empty it."""
    process = Daemon(x, daemon_config(llama[1].url, OWN_KEYS), name="handover")
    qt.set(f"Hello world {time.monotonic()}", 6)
    x.focus(qt.wid)
    x.set_clipboard("the user's clipboard, kept after exit ✓")
    x.set_clipboard("the user's selection, kept after exit", "primary")
    llama[0].queue.clear()
    llama[0].push(Reply(text="big "))
    x.key("ctrl+alt+u")
    process.wait_outcome(1)
    assert process.stop() == 0
    log = process.log()[-3000:]  # the keeper's lines included: it shares our stderr
    assert x.get_clipboard() == "the user's clipboard, kept after exit ✓", log
    assert x.get_clipboard("primary") == "the user's selection, kept after exit", log

"""``anyfill run --headless`` starts, grabs its hotkeys, and stops cleanly on SIGINT/SIGTERM,
releasing the grabs; a hotkey another program holds is a clear error."""

from __future__ import annotations

import signal

import pytest

from tests.e2e.harness import Daemon, XSession, daemon_config
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp

pytestmark = pytest.mark.desktop

OWN_KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+<f5>"
preview = "<ctrl>+<alt>+<f6>"
cancel = "<ctrl>+<alt>+<f7>"
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

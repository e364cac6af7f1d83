"""The pynput hotkey source (used where XGrabKey is not available) fires on a real key
press and ignores presses made while anyfill injects keys."""

from __future__ import annotations

import sys

import pytest

from tests.e2e.harness import REPO, XSession, wait_until

pytestmark = pytest.mark.desktop


def test_pynput_source_fires_on_the_user_and_not_on_our_own_keys(x: XSession) -> None:
    log = x.workdir / "pynput-probe.log"
    probe = x.spawn(
        [sys.executable, "-m", "tests.e2e.pynput_probe", "1.5"], log.name, cwd=str(REPO)
    )
    try:
        wait_until(lambda: "READY" in log.read_text(), 15, "the pynput listener")
        x.key("ctrl+alt+y")
        wait_until(lambda: "TRIGGER" in log.read_text(), 5, "the hotkey to fire")
        assert probe.wait(15) == 0
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait(5)
    lines = [line for line in log.read_text().splitlines() if line.startswith(("TRIG", "INJ"))]
    assert lines == ["TRIGGER complete", "INJECTED"]

"""Accessibility switched on while anyfill runs is used at once, without a restart.

A private X server whose D-Bus session cannot start the accessibility bus by itself (no
service files): anyfill starts, a press captures by keyboard (no caret: the popup would
open under the pointer). Then the user switches accessibility on (the bus launcher
starts) and restarts the application; the next press, a few seconds later, captures by
accessibility with the caret. anyfill used to remember the missing bus for 30 s per look.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.e2e.test_accessibility import BUS_LAUNCHER, MISSING
from tests.e2e.test_qt_target import answer_next, prepare, press
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(MISSING), reason=f"accessibility tests need {MISSING}"),
]

NO_ACTIVATION = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


@pytest.fixture
def session_without_a11y() -> Iterator[XSession]:
    with XSession.start() as session:
        config = session.workdir / "session-bus.conf"
        config.write_text(NO_ACTIVATION)
        started = subprocess.run(
            [
                "dbus-daemon",
                f"--config-file={config}",
                "--fork",
                "--print-address=1",
                "--print-pid=1",
            ],
            env=session.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        address, pid = started.stdout.split()[:2]
        session.env["DBUS_SESSION_BUS_ADDRESS"] = address
        session.env.pop("NO_AT_BRIDGE", None)
        session.env.pop("AT_SPI_BUS_ADDRESS", None)
        session.env["QT_LINUX_ACCESSIBILITY_ALWAYS_ON"] = "1"
        try:
            yield session
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)


def test_accessibility_switched_on_while_running_is_used_without_a_restart(
    session_without_a11y: XSession, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    from anyfill.daemon.atspi.session import RETRY_BUS_S

    x = session_without_a11y
    responder, server = llama
    config = daemon_config(server.url, '[capture]\nstrategies = ["accessibility", "keyboard"]\n')
    daemon = Daemon(x, config, name="anyfill-a11y-later")
    launcher = None
    target = QtTarget(x, "anyfill-before-a11y")
    try:
        prepare(x, target, "first line\nHello world", 17)
        answer_next(responder, Reply(text="big "))
        outcome = press(x, daemon)
        if outcome.status == "failed" and "press the hotkey again" in outcome.reason:
            # A fresh daemon's first press into an app that answered its keys late (seen
            # at load 11): nothing went in, and anyfill waits longer next time. The user
            # presses again, as the message says.
            assert target.state()["text"] == "first line\nHello world"
            answer_next(responder, Reply(text="big "))
            outcome = press(x, daemon)
        first_press = time.monotonic()
        assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome

        # The user switches accessibility on, and restarts the application.
        launcher = x.spawn([str(BUS_LAUNCHER), "--launch-immediately"], "a11y-later.log")
        target.close()
        target = QtTarget(x, "anyfill-after-a11y")
        prepare(x, target, "first line\nHello world", 17)
        # anyfill looks for a missing bus again after RETRY_BUS_S (one D-Bus round trip
        # per look); a press after that uses it.
        wait_until(lambda: time.monotonic() - first_press > RETRY_BUS_S, RETRY_BUS_S + 1, "")
        answer_next(responder, Reply(text="big "))
        # As a desktop shortcut does it: `trigger complete --wait` said "sent ... could not
        # be read back" (rc 1) where the text had landed.
        code, said = daemon.cli("trigger", "complete", "--wait")
        outcome = daemon.outcomes()[-1]
        assert (outcome.status, outcome.capture) == ("inserted", "accessibility"), (
            outcome,
            daemon.log()[-2000:],
        )
        assert code == 0, said
        assert said.startswith("inserted"), said
        assert target.state()["text"] == "first line\nHello big world"
    finally:
        target.close()
        daemon.stop()
        if launcher is not None:
            os.killpg(launcher.pid, signal.SIGTERM)
            launcher.wait(10)

"""Accessibility capture (AT-SPI) for real: a private X server with its own D-Bus session
and accessibility bus, the Qt target exposing its text, anyfill configured to capture by
accessibility only. No capture keys reach the app and PRIMARY is never touched; a
password field is recognised by its role and skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config
from tests.e2e.test_qt_target import USER_CLIP, USER_PRIMARY, answer_next, infill, prepare, press
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

BUS_LAUNCHER = Path("/usr/libexec/at-spi-bus-launcher")


def _atspi_missing() -> str:
    try:
        import gi

        gi.require_version("Atspi", "2.0")
        from gi.repository import Atspi  # noqa: F401
    except (ImportError, ValueError) as exc:
        return f"PyGObject with the Atspi typelib: {exc}"
    if not BUS_LAUNCHER.exists() or shutil.which("dbus-daemon") is None:
        return "at-spi2-core and dbus-daemon (Debian)"
    return ""


MISSING = _atspi_missing()
pytestmark = [
    pytest.mark.desktop,
    pytest.mark.skipif(bool(MISSING), reason=f"accessibility tests need {MISSING}"),
]


@pytest.fixture(scope="module")
def a11y() -> Iterator[XSession]:
    """A separate X server whose processes share one D-Bus session with an a11y bus."""
    with XSession.start() as session:
        started = subprocess.run(
            ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
            env=session.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        address, pid = started.stdout.split()[:2]
        session.env["DBUS_SESSION_BUS_ADDRESS"] = address
        session.env.pop("NO_AT_BRIDGE", None)
        session.env["QT_LINUX_ACCESSIBILITY_ALWAYS_ON"] = "1"
        launcher = session.spawn([str(BUS_LAUNCHER), "--launch-immediately"], "a11y.log")
        time.sleep(0.5)
        try:
            yield session
        finally:
            os.killpg(launcher.pid, signal.SIGTERM)
            launcher.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)


@pytest.fixture(scope="module")
def a11y_daemon(a11y: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    config = daemon_config(llama[1].url, '[capture]\nstrategies = ["accessibility"]\n')
    process = Daemon(a11y, config, name="anyfill-a11y")
    yield process
    process.stop()


def test_capture_by_accessibility_sends_no_capture_keys(
    a11y: XSession, a11y_daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    target = QtTarget(a11y, "anyfill-a11y-target")
    try:
        text = "first line a11y\nHello world"
        prepare(a11y, target, text, 22)
        responder, server = llama
        answer_next(responder, Reply(text="big "))
        before = len(infill(server))

        outcome = press(a11y, a11y_daemon)

        assert (outcome.status, outcome.capture) == ("inserted", "accessibility"), outcome
        sent = infill(server)[before:]
        assert [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in sent] == [
            (text[:22], text[22:])
        ]
        state = target.state()
        assert state["text"] == text[:22] + "big " + text[22:]
        assert state["caret"] == 26
        # Only the paste chord reached the app: no Ctrl+Shift+Home/End, no Ctrl+C.
        chords = [k for k in state["keys"] if not k.endswith(("Key_Control", "Key_Alt"))]
        assert chords == ["ctrl+Key_V"]
        assert a11y.get_clipboard() == USER_CLIP
        assert a11y.get_clipboard("primary") == USER_PRIMARY
    finally:
        target.close()


def test_password_field_is_neither_read_nor_filled(
    a11y: XSession, a11y_daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    target = QtTarget(a11y, "anyfill-login", password=True)
    try:
        target.set("hunter2", 3)
        a11y.focus(target.wid)
        before = len(infill(llama[1]))

        outcome = press(a11y, a11y_daemon)

        assert outcome.status == "skipped", outcome
        assert "password field" in outcome.reason
        assert len(infill(llama[1])) == before
        state = target.state()
        chords = [k for k in state["keys"] if not k.endswith(("Key_Control", "Key_Alt"))]
        assert (state["text"], chords) == ("hunter2", [])
    finally:
        target.close()


def test_the_windows_other_fields_go_as_context_but_never_its_password(
    a11y: XSession, a11y_daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    target = QtTarget(a11y, "anyfill-a11y-form", fields=True)
    try:
        text = "Dear team,\nthe launch is "
        prepare(a11y, target, text, len(text))
        responder, server = llama
        answer_next(responder, Reply(text="on Friday"))
        before = len(infill(server))

        outcome = press(a11y, a11y_daemon)

        assert (outcome.status, outcome.capture) == ("inserted", "accessibility"), outcome
        (sent,) = infill(server)[before:]
        extra = sent.json()["input_extra"]
        assert [chunk["text"] for chunk in extra] == ["Launch plan for Friday"]
        assert extra[0]["filename"].endswith(": anyfill e2e target - Subject")
        assert "hunter2" not in sent.body.decode()
    finally:
        target.close()

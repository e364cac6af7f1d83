"""A daemon killed (SIGKILL, a crash) leaves the user's clipboard readable: the keeper.

X drops a selection with its owner. The worst moment is between the paste keys and the
restore, when anyfill owns CLIPBOARD with the completion: here the target never fetches
the paste (its paste keys do nothing), so that moment lasts, and the daemon is killed in
it. The user's clipboard is a python-xlib owner with several formats (tests/e2e/
x11_owner.py); afterwards xclip reads its TARGETS, its text and its other formats back,
from the keeper, and PRIMARY too. The keeper ends once the user copies something else.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.e2e.test_qt_target import USER_PRIMARY, answer_next, unique
from tests.e2e.x11_owner import format_data, format_names
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

KEY = "ctrl+alt+y"
CONFIG = """
[hotkeys]
complete = "<ctrl>+<alt>+y"
preview = "<ctrl>+<alt>+t"
cancel = "<ctrl>+<alt>+g"

[insert]
restore_timeout_ms = 10000

[[insert.apps]]
match = "^anyfill-keeper-deaf$"
paste_keys = "<f8>"
"""
USER_TEXT = "the user's copied text ✓, kept through a crash"
FORMATS = 6
_runs = itertools.count()


@pytest.fixture
def user_clipboard(x: XSession) -> Iterator[subprocess.Popen[bytes]]:
    """The user copied in a rich app: several formats, the text among them."""
    run = next(_runs)
    text_file, ready = x.workdir / f"keeper-text-{run}", x.workdir / f"keeper-ready-{run}"
    text_file.write_text(USER_TEXT, encoding="utf-8")
    owner = ["tests.e2e.x11_owner", "plain", str(text_file), str(ready), "--formats", str(FORMATS)]
    process = x.spawn(
        [sys.executable, "-m", *owner],
        "x11-owner.log",
        cwd=str(REPO),
    )
    wait_until(ready.exists, 20, "the user's clipboard owner")
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(5)


def _keepers(x: XSession) -> list[int]:
    """Keeper processes on this test's display."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"anyfill.daemon.x11.keeper" in cmdline and f"DISPLAY={x.display}\0".encode() in environ:
            found.append(int(entry.name))
    return found


def _keeper_of(daemon: Daemon, x: XSession) -> int:
    """The keeper that ``daemon`` started (other daemons on the display have theirs)."""
    for pid in _keepers(x):
        status = Path(f"/proc/{pid}/status").read_text()
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent) == daemon.process.pid:
            return pid
    raise AssertionError("the daemon started no clipboard keeper")


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _assert_user_clipboard_readable(x: XSession) -> None:
    try:
        # Under two busy loops the X server's noticing the killed client, the keeper's
        # claim and xclip's read took over 5 s once in ~20 runs (then all was there).
        wait_until(lambda: x.get_clipboard() == USER_TEXT, 15, "the user's clipboard back")
    except TimeoutError as exc:
        logs = "".join(p.read_text(errors="replace") for p in x.workdir.glob("anyfill-keeper*.out"))
        now = (x.get_clipboard(), x.get_clipboard(target="TARGETS"), _keepers(x))
        raise AssertionError(f"clipboard now {now}; logs:\n{logs[-3000:]}") from exc
    listed = set((x.get_clipboard(target="TARGETS") or "").split())
    assert set(format_names(FORMATS)) <= listed, listed
    for name in format_names(FORMATS)[:-1]:
        assert x.get_clipboard(target=name) == format_data(name).decode(), name
    assert x.get_clipboard("primary") == USER_PRIMARY


def _killed(daemon: Daemon) -> None:
    daemon.process.send_signal(signal.SIGKILL)
    assert daemon.process.wait(10) == -signal.SIGKILL


def test_sigkill_while_the_completion_is_in_the_clipboard_leaves_the_users(
    x: XSession, llama: tuple[LlamaCpp, LoopbackServer], user_clipboard: subprocess.Popen[bytes]
) -> None:
    daemon = Daemon(x, daemon_config(llama[1].url, CONFIG), name="anyfill-keeper")
    keeper = _keeper_of(daemon, x)
    target = QtTarget(x, "anyfill-keeper-deaf")
    try:
        text = unique("Hello world")
        target.set(text, 6)
        x.focus(target.wid)
        x.set_clipboard(USER_PRIMARY, "primary")
        answer_next(llama[0], Reply(text="never "))

        x.key(KEY)
        # The worst moment: anyfill owns CLIPBOARD with the completion, waiting for a
        # fetch that never comes (restore_timeout_ms is 10 s).
        wait_until(lambda: x.get_clipboard() == "never ", 10, "the completion in CLIPBOARD")
        _killed(daemon)

        _assert_user_clipboard_readable(x)
        assert target.state()["text"] == text
        assert _running(keeper)  # it serves the user's clipboard now
        # Once the user copies elsewhere, there is nothing left to keep.
        x.set_clipboard("copied later")
        x.set_clipboard("selected later", "primary")
        wait_until(lambda: not _running(keeper), 10, "the keeper to end")
    finally:
        target.close()
        if daemon.process.poll() is None:
            daemon.stop()
        if _running(keeper):
            os.kill(keeper, signal.SIGKILL)


def test_sigkill_after_an_insertion_leaves_the_restored_clipboard(
    x: XSession, llama: tuple[LlamaCpp, LoopbackServer], user_clipboard: subprocess.Popen[bytes]
) -> None:
    """After a paste anyfill owns the user's restored clipboard, for as long as nobody
    copies; a crash any time later must not take it along."""
    daemon = Daemon(x, daemon_config(llama[1].url, CONFIG), name="anyfill-keeper2")
    keeper = _keeper_of(daemon, x)
    target = QtTarget(x, "anyfill-keeper-target")
    try:
        text = unique("Hello world")
        target.set(text, 6)
        x.focus(target.wid)
        x.set_clipboard(USER_PRIMARY, "primary")
        answer_next(llama[0], Reply(text="big "))

        x.key(KEY)
        outcome = daemon.wait_outcome(1)
        assert outcome.status == "inserted", outcome
        wait_until(lambda: user_clipboard.poll() is not None, 10, "anyfill to own the clipboard")
        wait_until(lambda: x.get_clipboard() == USER_TEXT, 5, "the restored clipboard")
        _killed(daemon)

        _assert_user_clipboard_readable(x)
        assert _running(keeper)
        assert target.state()["text"] == text[:6] + "big " + text[6:]
    finally:
        target.close()
        if daemon.process.poll() is None:
            daemon.stop()
        if _running(keeper):
            os.kill(keeper, signal.SIGKILL)

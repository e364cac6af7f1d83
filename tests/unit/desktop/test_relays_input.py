"""Which programs hand their windows' input to helper processes (daemon/desktop/process.py),
told from real process trees: a parent whose child carries Chromium's ``--type=`` mark
(or Firefox's ``-contentproc``), in separate arguments or in the one string Chromium
rewrites its command line into."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from anyfill.daemon.desktop.process import relays_input

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *sys.argv[1:]])
print(child.pid, flush=True)
time.sleep(60)
"""


@contextmanager
def parent_of_child_with(*args: str) -> Iterator[int]:
    """A parent process whose one child got ``args``; yields the parent's pid once the
    child runs."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *args], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while args and args[0] not in Path(f"/proc/{child}/cmdline").read_text():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.01)
        yield parent.pid
    finally:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()


@pytest.mark.parametrize(
    "args",
    [
        ("--type=renderer", "--lang=en-US"),  # Chromium, Electron
        ("--no-sandbox --type=zygote --lang=en-US",),  # as Chromium rewrites it: one string
        ("-contentproc", "-childID", "1"),  # Firefox
    ],
)
def test_a_parent_of_a_marked_helper_relays_its_input(args: tuple[str, ...]) -> None:
    with parent_of_child_with(*args) as parent:
        assert relays_input(parent)


@pytest.mark.parametrize("args", [(), ("--verbose", "--lang=en-US"), ("notes--type=x",)])
def test_a_parent_of_plain_children_does_not(args: tuple[str, ...]) -> None:
    with parent_of_child_with(*args) as parent:
        assert not relays_input(parent)


def test_the_marked_helper_itself_and_unknown_pids_do_not() -> None:
    assert not relays_input(None)
    assert not relays_input(0)
    assert not relays_input(2**22 + 12345)  # above pid_max: no such process

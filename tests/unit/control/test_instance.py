"""The per-user single-instance lock, held by real processes: refusal with the holder's pid,
release on exit and on a crash, and exactly one winner when many start at once."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anyfill.daemon import runtime_dir as paths
from anyfill.daemon.control.instance import InstanceLock, single_instance
from anyfill.daemon.errors import AlreadyRunning, ControlError

HOLD = """
import sys, time
from anyfill.daemon.control.instance import single_instance
from anyfill.daemon.errors import AlreadyRunning
start_at = float(sys.argv[1])
time.sleep(max(0.0, start_at - time.time()))
try:
    with single_instance():
        print("won", flush=True)
        time.sleep(float(sys.argv[2]))
except AlreadyRunning as exc:
    print(f"lost {exc.pid}: {exc}", flush=True)
"""


def holder(seconds: float, start_at: float = 0.0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(start_at), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def stop(process: subprocess.Popen[str], how: int = signal.SIGKILL) -> None:
    if process.poll() is None:
        process.send_signal(how)
    process.wait(10)
    if process.stdout is not None:
        process.stdout.close()


def first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def test_the_second_holder_is_refused_with_the_first_ones_pid(runtime: Path) -> None:
    first = holder(60)
    try:
        assert first_line(first) == "won"
        with pytest.raises(AlreadyRunning) as info:
            InstanceLock().acquire()
        assert info.value.pid == first.pid
        assert str(info.value).startswith(f"anyfill is already running (pid {first.pid}); ")
        assert "'anyfill status'" in str(info.value)
    finally:
        stop(first)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_lock_is_free_again_when_the_holder_dies(how: signal.Signals, runtime: Path) -> None:
    first = holder(60)
    assert first_line(first) == "won"
    stop(first, how)
    with single_instance() as lock:
        assert lock.held
        assert Path(lock.path).read_text() == f"{os.getpid()}\n"
    assert not lock.held


CHILD_OUTLIVES = """
import subprocess, sys, time
from anyfill.daemon.control.instance import single_instance
with single_instance():
    child = subprocess.Popen(["sleep", "60"])  # e.g. a helper the daemon started
    print(child.pid, flush=True)
    time.sleep(60)
"""


def test_a_child_that_outlives_the_daemon_does_not_keep_the_lock(runtime: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD_OUTLIVES], stdout=subprocess.PIPE, text=True
    )
    child_pid = int(first_line(parent))
    try:
        stop(parent)
        os.kill(child_pid, 0)  # the child still runs
        with single_instance() as lock:
            assert lock.held
    finally:
        os.kill(child_pid, signal.SIGKILL)


def test_release_clears_the_pid_and_keeps_the_file(runtime: Path) -> None:
    with single_instance() as lock:
        path = Path(lock.path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.exists()
    assert path.read_text() == ""


def test_of_many_started_at_once_exactly_one_wins(runtime: Path) -> None:
    start_at = time.time() + 1.5  # every interpreter is up before the common start time
    racers = [holder(3, start_at) for _ in range(6)]
    try:
        lines = [first_line(racer) for racer in racers]
    finally:
        for racer in racers:
            stop(racer)
    winners = [racer.pid for racer, line in zip(racers, lines, strict=True) if line == "won"]
    assert len(winners) == 1, lines
    losers = [line for line in lines if line != "won"]
    assert len(losers) == 5
    assert all(line.startswith(f"lost {winners[0]}: anyfill is already running") for line in losers)


def test_a_lock_file_that_is_a_symlink_is_refused(runtime: Path) -> None:
    directory = paths.ensure_private_dir(paths.control_dir())
    target = runtime / "elsewhere"
    target.write_text("")
    os.symlink(target, os.path.join(directory, "instance.lock"))
    with pytest.raises(ControlError, match="cannot open"):
        InstanceLock().acquire()

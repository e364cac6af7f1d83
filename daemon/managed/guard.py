"""A watchdog between the daemon and llama-server where the kernel offers no parent-death
signal (macOS, Windows): ``python -m anyfill.daemon.managed.guard PROGRAM ARGS...``.

It starts the program and reads its own stdin, a pipe whose other end only the daemon holds.
When the daemon dies, however it dies, the system closes that end, the read returns, and the
guard stops the program (SIGTERM, then SIGKILL after 3 s). A SIGTERM to the guard (the
daemon stopping normally) is passed on. The guard exits with the program's exit code.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from types import FrameType

GRACE_S = 3.0
"""Shorter than the daemon's own grace, so the guard finishes its job first."""


def _stop(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        child.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m anyfill.daemon.managed.guard PROGRAM [ARGS...]\n")
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def on_term(signum: int, frame: FrameType | None) -> None:
        _stop(child)

    signal.signal(signal.SIGTERM, on_term)

    def watch_daemon() -> None:
        sys.stdin.buffer.read()  # returns at EOF: the daemon closed the pipe or died
        _stop(child)

    threading.Thread(target=watch_daemon, name="watch-daemon", daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Starting a child that can never outlive the daemon.

On Linux the child asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``), which covers a daemon killed with SIGKILL too. The request is made
between fork and exec; if the daemon died in that instant the child sees a new parent
and exits at once. The signal is tied to the thread that forked, so the child is always
started from the event loop's thread, which lives as long as the daemon.

Elsewhere (``tie="pipe"``) the child runs under :mod:`~anyfill.daemon.managed.guard`, which
watches a pipe only the daemon holds open and stops the child when it closes.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, Literal

__all__ = ["Tie", "spawn_tied"]

Tie = Literal["auto", "pdeathsig", "pipe"]

_PR_SET_PDEATHSIG = 1


def _death_signal_hook() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    parent = os.getpid()

    def tie_to_parent() -> None:  # runs in the child, between fork and exec
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the daemon died before the prctl took effect
            os._exit(1)

    return tie_to_parent


async def spawn_tied(
    argv: Sequence[str], log: IO[Any], tie: Tie = "auto"
) -> asyncio.subprocess.Process:
    """Start ``argv`` with its output going to ``log``, stopped if the daemon dies.

    With the pipe, the process returned is the guard's; signals to it reach ``argv``."""
    hook = _death_signal_hook() if tie in ("auto", "pdeathsig") else None
    if tie == "pdeathsig" and hook is None:
        raise OSError("no parent-death signal on this system")
    if hook is not None:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=hook,
            start_new_session=True,  # a Ctrl+C in the daemon's terminal is the daemon's
        )
    # The write end of stdin stays with the daemon, unwritten, until it exits or dies.
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "anyfill.daemon.managed.guard",
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=sys.platform != "win32",
    )

"""Starting a child that can never outlive the daemon.

On Linux the child asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``), which covers a daemon killed with SIGKILL too. The request is made
between fork and exec; if the daemon died in that instant the child sees a new parent
and exits at once. The signal is tied to the thread that forked, so the child is always
started from the event loop's thread, which lives as long as the daemon.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

__all__ = ["spawn_tied"]

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


async def spawn_tied(argv: Sequence[str], log: IO[Any]) -> asyncio.subprocess.Process:
    """Start ``argv`` with its output going to ``log``, killed if the daemon dies."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=_death_signal_hook(),
        start_new_session=True,  # a Ctrl+C in the daemon's terminal is the daemon's to handle
    )

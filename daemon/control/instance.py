"""One ``anyfill run`` per user: an ``flock`` on ``instance.lock`` beside the control socket.

The lock is held for the daemon's whole life and released by the kernel when the process
ends, however it ends, so a crash never leaves a lock behind (a stale socket it may leave
is replaced by the next daemon, see :mod:`.server`). ``flock`` is atomic: of two
``anyfill run`` started at once exactly one gets it; the other reads the winner's pid from
the file and says so. The file is never deleted: unlinking a lock file lets a third process
lock a new inode while the second still holds the old one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from anyfill.daemon import runtime_dir
from anyfill.daemon.errors import AlreadyRunning, ControlError


def running_message(pid: int | None, where: str | None = None) -> str:
    who = f"pid {pid}" if pid else f"it answers on {where}" if where else "pid unknown"
    return (
        f"anyfill is already running ({who}); use 'anyfill status' to see it, "
        "'anyfill trigger complete' to send it a hotkey, or stop it before starting another"
    )


class InstanceLock:
    """Held from :meth:`acquire` until :meth:`release` or the end of the process."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else runtime_dir.lock_path()
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`AlreadyRunning` naming the holder's pid."""
        if self._fd is not None:
            return
        runtime_dir.ensure_private_dir(os.path.dirname(self.path))
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ControlError(f"cannot open {self.path}: {exc.strerror or exc}") from exc
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise ControlError(f"{self.path} belongs to another user; remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _holder_pid(fd)
                raise AlreadyRunning(running_message(pid), pid) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock


def _holder_pid(fd: int, within_s: float = 0.5) -> int | None:
    """The pid the holder wrote; it writes right after locking, so wait a moment for it."""
    deadline = time.monotonic() + within_s
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return int(text)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


@contextlib.contextmanager
def single_instance(path: str | None = None) -> Iterator[InstanceLock]:
    """``with single_instance(): run the daemon`` -- raises :class:`AlreadyRunning`."""
    lock = InstanceLock(path)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()

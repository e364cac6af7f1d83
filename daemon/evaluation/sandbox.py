"""Running a problem's test on a generated middle: a subprocess per program with a time
limit, no network, a scratch directory of its own and resource limits.

Two layers keep the network away. Where the kernel lets this user make namespaces, the
program runs under ``unshare --user --map-root-user --net``: a network namespace with no
interface up, so not even loopback reaches anything of the host. Everywhere, an audit hook
(PEP 578) installed before the program runs refuses every socket, subprocess, fork, exec,
ctypes and signal-sending call and every file write outside the scratch directory. Audit
hooks cannot be removed from Python code, unlike a patched ``socket`` module, and they see
the C-level calls (``_socket``) too. It is a guard against generated code that goes astray,
not a sandbox against an attacker: run models you do not trust in a container.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["Outcome", "Sandbox", "Verdict", "network_namespace_prefix"]

Outcome = Literal["passed", "failed", "timed out"]

MEMORY_LIMIT_BYTES = 2 * 2**30
"""Address space of one test run (the largest HumanEval test needs a few tens of MiB)."""
FILE_SIZE_LIMIT_BYTES = 16 * 2**20
OPEN_FILES_LIMIT = 64
_DETAIL_CHARS = 300

# Runs in the child before the program: ``-I`` (isolated) and ``-B`` keep the user's site,
# environment and bytecode caches out; the hook is installed before any generated code.
_GUARD = r"""
import os, sys
def _anyfill_guard():
    root = os.path.realpath(os.getcwd()) + os.sep
    refused = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn",
               "os.spawn", "os.fork", "os.forkpty", "pty.", "ctypes.", "os.kill",
               "os.killpg", "signal.pthread_kill", "_posixsubprocess.")
    paths = {"os.remove", "os.rename", "os.replace", "os.rmdir", "os.mkdir", "os.symlink",
             "os.link", "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree",
             "shutil.copyfile", "shutil.move"}
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    realpath, fspath = os.path.realpath, os.fspath
    def outside(path):
        try:
            path = fspath(path)
        except TypeError:
            return False
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        return not isinstance(path, str) or not (realpath(path) + os.sep).startswith(root)
    def hook(event, args):
        if event.startswith(refused):
            raise PermissionError(f"anyfill eval sandbox: {event} is not allowed")
        if event == "open" and len(args) >= 3 and not isinstance(args[0], int):
            mode, flags = args[1] or "", args[2] or 0
            wants_write = any(c in mode for c in "wax+") or bool(flags & writing)
            if wants_write and outside(args[0]):
                raise PermissionError(f"anyfill eval sandbox: writing {args[0]!r} is not allowed")
        elif event in paths and any(
            outside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))
        ):
            raise PermissionError(f"anyfill eval sandbox: {event} outside the scratch directory")
    sys.addaudithook(hook)
_anyfill_guard()
del _anyfill_guard
with open(sys.argv[1], encoding="utf-8") as _anyfill_file:
    _anyfill_code = compile(_anyfill_file.read(), sys.argv[1], "exec")
del _anyfill_file
exec(_anyfill_code, {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    detail: str
    """Why it did not pass: the last line the test printed to stderr, or the limit hit."""
    ms: float

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@functools.cache
def network_namespace_prefix() -> tuple[str, ...]:
    """``unshare`` arguments that put the child in a new network namespace, or ``()``
    where this user may not make one (the audit hook still refuses sockets)."""
    binary = shutil.which("unshare")
    if binary is None:
        return ()
    prefix = (binary, "--user", "--map-root-user", "--net", "--")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if probe.returncode == 0 else ()


@dataclass(frozen=True)
class Sandbox:
    time_limit_s: float = 5.0
    memory_bytes: int = MEMORY_LIMIT_BYTES
    network_namespace: bool = True
    """Use a network namespace when the system allows one (the audit hook holds anyway)."""

    @property
    def isolation(self) -> str:
        """How the network is kept away, for the output."""
        if self.network_namespace and network_namespace_prefix():
            return "network namespace (unshare) + audit hook"
        return "audit hook (no network namespace available)"

    def _limit_resources(self) -> None:  # runs in the child between fork and exec
        cpu = math.ceil(self.time_limit_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES_LIMIT, OPEN_FILES_LIMIT))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    async def run(self, program: str) -> Verdict:
        """Run ``program`` (a whole Python file); it passes when it exits with 0."""
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="anyfill-eval-") as scratch:
            folder = Path(scratch)
            (folder / "program.py").write_text(program, encoding="utf-8")
            prefix = network_namespace_prefix() if self.network_namespace else ()
            argv = [*prefix, sys.executable, "-I", "-B", "-c", _GUARD, "program.py"]
            env = {"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": scratch, "TMPDIR": scratch}
            with (folder / "out").open("wb") as out, (folder / "err").open("wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd=scratch,
                    env=env,
                    start_new_session=True,  # the whole group is killed at the limit
                    preexec_fn=self._limit_resources,
                )
                try:
                    code = await asyncio.wait_for(proc.wait(), self.time_limit_s)
                except TimeoutError:
                    _kill_group(proc.pid)
                    await proc.wait()
                    return Verdict(
                        "timed out", f"killed after {self.time_limit_s:g} s", _ms(started)
                    )
                except BaseException:  # cancelled (Ctrl+C): leave nothing running
                    _kill_group(proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        await asyncio.shield(proc.wait())
                    raise
            if code == 0:
                return Verdict("passed", "", _ms(started))
            if code in (-signal.SIGXCPU, -signal.SIGKILL) or code == 128 + signal.SIGXCPU:
                return Verdict("timed out", "CPU time limit", _ms(started))
            return Verdict("failed", _last_line(folder / "err", code), _ms(started))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _last_line(path: Path, code: int) -> str:
    with path.open("rb") as file:
        file.seek(max(0, path.stat().st_size - 4096))
        tail = file.read().decode("utf-8", "replace")
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit status {code}")[:_DETAIL_CHARS]

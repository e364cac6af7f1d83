"""What runs the managed server: a compiled ``llama-server``, else the prebuilt runtime.

The compiled server (the config's path, PATH, anyfill's own build) is preferred: it is the
faster path where it exists. Without one, the ``local`` extra (``pip install
'anyfill[local]'``) brings xllamacpp, a wheel with llama.cpp's own HTTP server, which
:mod:`~anyfill.daemon.managed.prebuilt_server` runs as a child process taking the same
arguments, so the supervisor treats both alike (port, key file, health, restarts).

The daemon never imports xllamacpp: its x86-64 wheel is built for AVX2 and dies with SIGILL
on a CPU without it, so the CPU is checked from ``/proc/cpuinfo`` first.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from anyfill.daemon.managed.binary import INSTALL_HINT, FoundBinary, find_binary

__all__ = [
    "LOCAL_EXTRA_HINT",
    "PREBUILT",
    "RUNTIME_HINT",
    "NoRuntime",
    "cpu_lacks_avx2",
    "find_runtime",
]

PREBUILT = "xllamacpp"
"""The distribution (and import name) of the prebuilt runtime the ``local`` extra installs."""

LOCAL_EXTRA_HINT = (
    "install anyfill's prebuilt llama.cpp runtime: pip install 'anyfill[local]' "
    "(pipx: pipx inject anyfill xllamacpp; needs an x86-64 CPU with AVX2, or arm64)"
)
RUNTIME_HINT = f"{LOCAL_EXTRA_HINT}; or {INSTALL_HINT}"

CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class NoRuntime:
    """Nothing can run the managed server: ``detail`` says why, ``fix`` what to do."""

    detail: str
    fix: str


def cpu_lacks_avx2(cpuinfo: Path = CPUINFO) -> bool:
    """True on a Linux x86-64 CPU whose flags have no ``avx2`` (the prebuilt wheel's floor).
    Other systems and machines (arm64, macOS) are not x86-64 wheels' concern: False."""
    if not sys.platform.startswith("linux") or platform.machine().lower() not in (
        "x86_64",
        "amd64",
    ):
        return False
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False  # cannot tell: let it try (a crash is then reported by the supervisor)
    for line in text.splitlines():
        if line.startswith("flags"):
            return "avx2" not in line.partition(":")[2].split()
    return False


def _prebuilt_version() -> str:
    try:
        return metadata.version(PREBUILT)
    except metadata.PackageNotFoundError:
        return ""


def find_runtime(configured: str = "", cpuinfo: Path = CPUINFO) -> FoundBinary | NoRuntime:
    """The compiled llama-server when there is one, else the prebuilt runtime, else why not.

    A configured binary that is not there is not replaced by the prebuilt runtime: the user
    asked for that one."""
    found = find_binary(configured)
    if found is not None:
        return found
    if configured:
        return NoRuntime(
            f"no llama-server at {configured} (server.binary)",
            f"install it there, or empty server.binary to use PATH or the prebuilt runtime; "
            f"{INSTALL_HINT}",
        )
    spec = importlib.util.find_spec(PREBUILT)
    if spec is None or not spec.submodule_search_locations:
        return NoRuntime(
            "llama-server is not installed, nor anyfill's prebuilt runtime", RUNTIME_HINT
        )
    if cpu_lacks_avx2(cpuinfo):
        return NoRuntime(
            f"the prebuilt runtime ({PREBUILT}) is installed but needs a CPU with AVX2, "
            "and this CPU has none (no 'avx2' in /proc/cpuinfo)",
            "install llama.cpp built for this CPU (Debian 13+ / Ubuntu 25.04+: 'sudo apt "
            "install llama.cpp'; macOS: 'brew install llama.cpp'), or set server.binary to a "
            "llama-server built with -DGGML_NATIVE=ON (anyfill's own build targets AVX2 too)",
        )
    version = _prebuilt_version()
    return FoundBinary(
        Path(next(iter(spec.submodule_search_locations))),
        f"the prebuilt runtime, {PREBUILT} {version}".rstrip(),
        program=(sys.executable, "-m", "anyfill.daemon.managed.prebuilt_server"),
    )

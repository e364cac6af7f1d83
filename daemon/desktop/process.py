"""The name of the process behind a window, for app rules (``process = "..."``)."""

from __future__ import annotations

from pathlib import Path


def process_name(pid: object) -> str:
    """The command name of process ``pid`` (``/proc/PID/comm``), empty when unknown."""
    if not isinstance(pid, int) or pid <= 0:
        return ""
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


RELAY_MARKERS = ("--type=", "-contentproc")
"""Command-line marks of helper processes that handle a program's page input: Chromium's
and Electron's (``--type=zygote``, ``--type=renderer``), Firefox's (``-contentproc``)."""
_relays: dict[tuple[int, str], bool] = {}
"""Per (pid, start time): whether the process relays its input (it never stops)."""
MAX_REMEMBERED = 256


def relays_input(pid: object) -> bool:
    """Whether process ``pid`` runs helper processes that handle its windows' input (see
    ``Target.relays_input``): one of its children carries a RELAY_MARKERS mark. False
    when unknown (no such process, no /proc)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    started = _start_time(pid)
    if started is None:
        return False
    key = (pid, started)
    if key not in _relays:
        if len(_relays) >= MAX_REMEMBERED:
            _relays.clear()
        _relays[key] = any(_has_mark(child) for child in _children(pid))
    return _relays[key]


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat): a pid reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
    return fields[19] if len(fields) > 19 else None


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return children
    for task in tasks:
        try:
            children.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return children


def _has_mark(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # Chromium rewrites its command line as one string, its arguments split by spaces.
    words = cmdline.replace(b"\0", b" ").decode("utf-8", "replace").split()
    return any(word.startswith(RELAY_MARKERS) for word in words[1:])

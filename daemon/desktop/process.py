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

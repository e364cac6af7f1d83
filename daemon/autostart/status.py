"""What ``anyfill autostart status`` and ``anyfill doctor`` report: the entries found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from anyfill.daemon.autostart.files import State


@dataclass(frozen=True)
class Entry:
    """One way anyfill may start with the session, as found on disk (or in the registry)."""

    method: str
    """``xdg``, ``systemd``, ``launchagent`` or ``registry``."""
    location: str
    state: State
    problem: str = ""
    """Why it will not start anyfill as expected, with the fix; empty when it will."""
    note: str = ""


@dataclass(frozen=True)
class AutostartStatus:
    entries: list[Entry]
    """Only the entries that exist."""
    launcher: State
    """The application menu entry (Linux); ``absent`` elsewhere."""
    command: str
    """What ``anyfill autostart enable`` would start."""
    notes: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return any(not entry.problem for entry in self.entries)

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "command": self.command,
            "launcher": self.launcher,
            "entries": [asdict(entry) for entry in self.entries],
            "notes": list(self.notes),
        }

    def text(self) -> str:
        if not self.entries:
            lines = ["off: anyfill does not start with your session ('anyfill autostart enable')"]
        else:
            lines = []
            for entry in self.entries:
                verdict = f"does not start: {entry.problem}" if entry.problem else "on"
                lines.append(f"{entry.method}: {verdict} ({entry.location})")
                if entry.note:
                    lines.append(f"  {entry.note}")
        if self.launcher != "absent":
            lines.append(f"menu launcher: {self.launcher}")
        lines += self.notes
        return "\n".join(lines)

"""Human-readable lines for ``anyfill status`` and ``anyfill trigger --wait`` (stdlib only)."""

from __future__ import annotations

import json
from typing import Any


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def outcome_line(outcome: dict[str, Any]) -> str:
    """``inserted in mousepad (paste, capture keyboard, 4 chars, 123 ms)``."""
    status = str(outcome.get("status", "?"))
    where = f" in {outcome['app']}" if outcome.get("app") else ""
    details = []
    if outcome.get("method"):
        details.append(str(outcome["method"]))
    if outcome.get("capture"):
        details.append(f"capture {outcome['capture']}")
    if outcome.get("chars"):
        details.append(f"{outcome['chars']} chars")
    details.append(f"{float(outcome.get('ms', 0)):.0f} ms")
    line = f"{status}{where} ({', '.join(details)})"
    if outcome.get("reason") and outcome.get("reason") != status:
        line += f": {outcome['reason']}"
    return line


def status_text(status: dict[str, Any]) -> str:
    ui = status.get("ui") or "headless"
    lines = [
        f"anyfill {status.get('version', '?')} is running (pid {status.get('pid', '?')}, "
        f"up {duration(float(status.get('uptime_s', 0)))}, {ui}"
        + (f", {status['desktop']}" if status.get("desktop") else "")
        + ")",
        f"state:    {status.get('state', '?')}",
        f"backends: {', '.join(status.get('backends') or []) or 'none'}",
    ]
    hotkeys = status.get("hotkeys") or {}
    if hotkeys:
        lines.append("hotkeys:  " + ", ".join(f"{name} {key}" for name, key in hotkeys.items()))
    last = status.get("last")
    if isinstance(last, dict):
        age = duration(float(last.get("age_s", 0)))
        lines.append(f"last:     {last.get('action', '?')} {outcome_line(last)}, {age} ago")
    else:
        lines.append("last:     no hotkey press yet")
    for name, value in (status.get("sections") or {}).items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"{name}: {shown}")
    return "\n".join(lines)

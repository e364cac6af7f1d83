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
    if status.get("suggestions") not in (None, "off"):
        lines.append(f"suggest:  as you type, {status['suggestions']}")
    hotkeys = status.get("hotkeys") or {}
    if hotkeys:
        lines.append("hotkeys:  " + ", ".join(f"{name} {key}" for name, key in hotkeys.items()))
    last = status.get("last")
    if isinstance(last, dict):
        age = duration(float(last.get("age_s", 0)))
        lines.append(f"last:     {last.get('action', '?')} {outcome_line(last)}, {age} ago")
    else:
        lines.append("last:     no hotkey press yet")
    for server in status.get("managed") or []:
        lines.append(f"managed:  {managed_line(server)}")
    for name, value in (status.get("sections") or {}).items():
        lines.append(f"{name}: {section_text(name, value)}")
    return "\n".join(lines)


_SERVER_STATES = {
    "stopped": "stopped",
    "starting": "starting",
    "ready": "ready",
    "restarting": "restarting",
    "failed": "failed",
    "missing_binary": "cannot start: nothing to run llama.cpp with",
    "missing_model": "cannot start: no model",
}


def managed_line(server: dict[str, Any]) -> str:
    """``managed ready at http://127.0.0.1:41234 (pid 4242, model qwen…gguf)``; a server
    that cannot run says why and what to do."""
    state = str(server.get("state", "?"))
    line = f"{server.get('backend', '?')} {_SERVER_STATES.get(state, state)}"
    if server.get("url") and state in ("ready", "starting", "restarting"):
        line += f" at {server['url']}"
    details = []
    if server.get("pid"):
        details.append(f"pid {server['pid']}")
    if server.get("model"):
        details.append(f"model {server['model']}")
    if details:
        line += f" ({', '.join(details)})"
    if state not in ("ready", "starting") and server.get("detail"):
        line += f": {server['detail']}"
    if server.get("fix"):
        line += f"; {server['fix']}"
    return line


def section_text(name: str, value: Any) -> str:
    """A status section another layer adds, in words: the tray's icon, the config file;
    anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if name == "tray" and isinstance(value, dict) and "error" not in value:
        if value.get("icon"):
            return "the icon shows in the system tray"
        if value.get("host") is False:
            return "no system tray here, so no icon (the hotkeys and the preview work)"
        return "no icon shown"
    if isinstance(value, dict) and set(value) == {"error"}:
        return f"could not be read: {value['error']}"
    return json.dumps(value, ensure_ascii=False)

"""What the tray shows, derived from core events alone (no Qt here: plain logic, tested
on its own). :meth:`TrayState.apply` folds one event in and says whether anything changed."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from anyfill.daemon.bus.status import (
    DaemonStatus,
    PressFinished,
    PressStarted,
    PreviewClosed,
    PreviewShown,
    Problem,
)
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.models.catalog import human_size
from anyfill.daemon.models.download import ModelDownload
from anyfill.daemon.scheduler.events import AttemptFinished, BackendMetrics, CooldownChanged

Look = Literal["idle", "working", "preview", "paused", "cooling", "error"]
LOOKS: tuple[Look, ...] = ("idle", "working", "preview", "paused", "cooling", "error")

ERROR_SHOWN_S = 30.0
"""A failed press keeps the error look this long (or until the next press succeeds)."""
_FAILED = ("failed",)
MISSING = ("missing_binary", "missing_model")
SERVER_WORDS = {
    "stopped": "stopped",
    "starting": "starting",
    "ready": "ready",
    "restarting": "restarting",
    "failed": "failed",
    "missing_binary": "llama-server is missing",
    "missing_model": "its model is not downloaded",
}


@dataclass
class TrayState:
    paused: bool = False
    insert_mode: str = "paste"
    chain: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    suggestions: str = "off"
    """Suggestions as you type: off, on, paused (``DaemonStatus.suggestions``)."""
    in_flight: set[int] = field(default_factory=set)
    preview_open: int | None = None
    cooling: dict[str, str] = field(default_factory=dict)
    """Backend -> reason, for every backend in cooldown."""
    error: str = ""
    error_at: float = 0.0
    last_ms: float | None = None
    last_backend: str = ""
    metrics: dict[str, BackendMetrics] = field(default_factory=dict)
    problems: deque[Problem] = field(default_factory=lambda: deque(maxlen=20))
    servers: dict[str, ManagedServerChanged] = field(default_factory=dict)
    quiet: frozenset[str] = frozenset()
    """Default local backends the user never set up (``managed.optional``)."""
    absent: set[str] = field(default_factory=set)
    """Those of ``quiet`` where nothing listened at the last try: not running, which is no
    trouble, so their cooldown is not the tray's headline."""
    """Managed llama-server of each backend -> its last state (with the fix when missing)."""
    download: ModelDownload | None = None
    """The model download running now, if any."""

    def missing(self) -> list[ManagedServerChanged]:
        return [s for s in self.servers.values() if s.state in MISSING]

    def apply(self, event: object, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if isinstance(event, DaemonStatus):
            self.paused, self.insert_mode = event.paused, event.insert_mode
            self.chain, self.backends = event.chain, event.backends
            self.suggestions = event.suggestions
        elif isinstance(event, PressStarted):
            self.in_flight.add(event.press_id)
        elif isinstance(event, PressFinished):
            self.in_flight.discard(event.press_id)
            if event.status in _FAILED:
                self.error, self.error_at = event.reason or "the completion failed", now
            elif event.status in ("inserted", "sent", "clipboard", "dismissed", "empty"):
                self.error = ""
            if event.backend and event.ms:
                self.last_ms, self.last_backend = event.ms, event.backend
        elif isinstance(event, PreviewShown):
            self.preview_open = event.preview_id
        elif isinstance(event, PreviewClosed):
            if self.preview_open == event.preview_id:
                self.preview_open = None
        elif isinstance(event, CooldownChanged):
            if event.cooling:
                self.cooling[event.backend] = event.reason or "cooling down"
            else:
                self.cooling.pop(event.backend, None)
        elif isinstance(event, BackendMetrics):
            self.metrics[event.backend] = event
            return False  # only the tooltip's figures: no redraw of the icon needed
        elif isinstance(event, Problem):
            self.problems.append(event)
            self.error, self.error_at = event.message, now
        elif isinstance(event, ManagedServerChanged):
            if self.servers.get(event.backend) == event:
                return False
            self.servers[event.backend] = event
        elif isinstance(event, ModelDownload):
            self.download = event if event.state == "running" else None
        elif isinstance(event, AttemptFinished):
            if event.backend not in self.quiet:
                return False
            was = event.backend in self.absent
            if event.outcome == "unavailable":
                self.absent.add(event.backend)
            elif event.outcome == "ok":
                self.absent.discard(event.backend)
            return was != (event.backend in self.absent)
        else:
            return False
        return True

    def look(self, now: float | None = None) -> Look:
        """The icon to show; the most urgent state wins."""
        now = time.monotonic() if now is None else now
        if self.paused:
            return "paused"
        if self.preview_open is not None:
            return "preview"
        if self.in_flight:
            return "working"
        if self.chain and self.chain[0] in self.cooling and self.chain[0] not in self.absent:
            return "cooling"  # says more than the error the cooldown itself caused
        if self._recent_error(now):
            return "error"
        if self.download is None and self.missing():
            return "error"  # a managed server is needed (nothing answered before it) and cannot run
        return "idle"

    def _marked(self, name: str) -> str:
        if name in self.absent:
            return f"{name} (not running)"
        return f"{name} (cooling)" if name in self.cooling else name

    def _recent_error(self, now: float) -> bool:
        return bool(self.error) and now - self.error_at < ERROR_SHOWN_S

    def tokens_today(self) -> tuple[int, float]:
        tokens = sum(
            m.prompt_tokens_today + m.completion_tokens_today for m in self.metrics.values()
        )
        cost = sum(m.cost_today for m in self.metrics.values())
        return tokens, cost

    def tooltip(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        look = self.look(now)
        headline = {
            "idle": "ready",
            "working": f"working ({len(self.in_flight)} in flight)",
            "preview": "preview shown",
            "paused": "paused: hotkeys do nothing",
            "cooling": f"{self.chain[0] if self.chain else 'backend'} is cooling down",
            "error": f"error: {self.error}" if self._recent_error(now) else "a fix is needed",
        }[look]
        lines = [f"anyfill: {headline}"]
        if self.chain:
            marked = [self._marked(name) for name in self.chain]
            lines.append("backends: " + " → ".join(marked))
        for server in self.servers.values():
            lines.append(f"{server.backend} (managed): {SERVER_WORDS[server.state]}")
            if server.state in MISSING and server.fix:
                lines.append(f"  fix: {server.fix}")
        if self.download is not None:
            done, total = self.download.done, self.download.total
            share = f" ({100 * done // total}%)" if total else ""
            lines.append(f"downloading {self.download.model}: {human_size(done)}{share}")
        lines.append(f"insert: {self.insert_mode}")
        if self.suggestions != "off":
            lines.append(f"suggestions as you type: {self.suggestions}")
        if self.last_ms is not None:
            lines.append(f"last: {self.last_ms:.0f} ms ({self.last_backend})")
        tokens, cost = self.tokens_today()
        if tokens or cost:
            lines.append(f"today: {tokens:,} tokens, ${cost:.4f}")
        return "\n".join(lines)

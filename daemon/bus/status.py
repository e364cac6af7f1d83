"""Events of the desktop daemon for the tray, the preview popup and (later) MQTT.

Captured text travels only in the in-process events that need it to be shown on this
desktop (``PreviewShown``, ``PreviewText``, ``PressFinished.middle``): a bridge that
leaves the process (MQTT) must drop those fields unless ``privacy.mqtt_text`` is on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from anyfill.daemon.context import CaretRect, ScreenArea


@dataclass(frozen=True)
class DaemonStatus:
    """The daemon's switches, published whenever one changes (retained)."""

    paused: bool
    insert_mode: str
    chain: tuple[str, ...]
    """Backends asked in order for a completion (the first one is the active backend)."""
    backends: tuple[str, ...] = ()
    """Every enabled backend, for the tray's "first backend" menu."""
    suggestions: str = "off"
    """Suggestions as you type: ``off`` (the setting), ``on``, or ``paused`` (the tray)."""

    @property
    def topic(self) -> str:
        return "state/daemon"


@dataclass(frozen=True)
class PressStarted:
    """A hotkey press began its way through capture and completion."""

    press_id: int
    action: str

    @property
    def topic(self) -> str:
        return "events/press/started"


PressStatus = Literal[
    "inserted", "sent", "clipboard", "kept", "empty", "skipped", "failed", "cancelled", "dismissed"
]
"""``inserted``: the text was read back in the document. ``sent``: it was pasted or
typed but could not be checked (the completion stays in the history to paste by hand)."""


@dataclass(frozen=True)
class PressFinished:
    """What became of one press: the pipeline's result (``Outcome``), the history the tray
    shows, what the control socket reports, and the event on the bus, as one value."""

    action: str
    status: PressStatus
    reason: str = ""
    app: str = ""
    middle: str | None = None
    """The completion, kept even when it was not inserted (focus moved); captured-text
    privacy rules apply (see the module doc)."""
    method: str = ""
    ms: float = 0.0
    capture: str = ""
    """The strategy that read the text around the caret."""
    backend: str = ""
    finished: float = field(default_factory=time.time)
    """Wall-clock time (``time.time()``) the press ended."""
    press_id: int = 0

    @property
    def topic(self) -> str:
        return "events/press/finished"


@dataclass(frozen=True)
class PreviewShown:
    """The preview hotkey captured a context: the popup opens and says "thinking…"."""

    preview_id: int
    app: str
    caret: CaretRect | None
    line_before: str
    """The end of the prefix's last line (shown dimmed before the completion)."""
    line_after: str
    """The start of the suffix's first line (shown dimmed after it)."""
    monospace: bool
    keys: tuple[tuple[str, str], ...] = ()
    """(action, hotkey) of the keys the popup takes while visible, for its hint line."""
    screen: ScreenArea | None = None
    """The output the target window is on, where the platform tells (Wayland: compositor
    IPC); ``caret`` is then in the same (desktop) coordinates."""
    hint: str = ""
    """Said instead of the keys when the popup has no key to insert with (Wayland
    without compositor IPC): how to insert and dismiss."""
    style: str = "popup"
    """``ghost``: dimmed text at the caret (the popup where no caret is known); ``popup``."""
    auto: bool = False
    """A suggestion as you type (no key was pressed for it)."""
    font_family: str = ""
    font_size: float = 0.0
    """The application's font at the caret where it tells (points; 0: unknown)."""
    lines: int = 3
    """How many lines of a multi-line completion the ghost shows."""

    @property
    def topic(self) -> str:
        return "events/preview/shown"


@dataclass(frozen=True)
class PreviewText:
    """The completion so far (``final``: cleaned and complete, Tab/Enter inserts it)."""

    preview_id: int
    text: str
    backend: str
    final: bool = False
    ms: float | None = None
    """Time to the first token (streaming) or the whole answer (final)."""
    alternative: int = 0
    """Which alternative this is (0: the first answer; Alt+]/Alt+[ move between them)."""
    error: str = ""
    how: str = ""
    """What an alternative is: "next backend" (another backend's answer) or "another
    sample" (the same backend asked again with another seed); '' for the first answer."""

    @property
    def topic(self) -> str:
        return "events/preview/text"


@dataclass(frozen=True)
class PreviewClosed:
    preview_id: int
    reason: str
    """accepted, dismissed, focus, typing, click, superseded, cancelled, error, empty."""

    @property
    def topic(self) -> str:
        return "events/preview/closed"


@dataclass(frozen=True)
class Problem:
    """Something the user must fix, with the fix; the tray notifies each kind once."""

    kind: str
    """backend_down, key_refused, hotkey_taken, no_display, no_tray, ..."""
    message: str
    fix: str = ""

    @property
    def topic(self) -> str:
        return f"events/problem/{self.kind}"


@dataclass(frozen=True)
class ShowWindow:
    """Someone (a second ``anyfill run``, the control socket) asks the UI to open a window."""

    window: str
    """settings, diagnostics."""

    @property
    def topic(self) -> str:
        return "events/ui/show"


@dataclass(frozen=True)
class BackendsReady:
    """The backends of a new engine are built: once after ready (the start does not wait
    for them) and again after each reload that rebuilt them. Whoever shows the backends
    (MQTT's retained status, the tray's managed servers) reads them now."""

    backends: tuple[str, ...]
    """The backends built, in the configuration's order."""
    unusable: tuple[tuple[str, str], ...] = ()
    """(name, why) of each backend that could not be built (our words, no captured text)."""

    @property
    def topic(self) -> str:
        return "state/backends"

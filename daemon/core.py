"""The running daemon's one command interface: what the tray, the control socket and MQTT
may ask — trigger a press, act on the preview, cancel, pause and resume, read the status.

Every method runs on the core's asyncio loop thread (the Qt side goes through
``anyfill.ui.bridge``). Commands change the live settings (``core.live``) that every part
reads when it needs a value, and announce the result as a :class:`DaemonStatus` on the bus.
The layers that offer these commands (``anyfill.daemon.control``, ``anyfill.daemon.mqtt``,
``anyfill.ui``) import this module; it imports none of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from anyfill.config.model import InsertMode, Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import DaemonStatus, PressFinished, ShowWindow
from anyfill.daemon.desktop.hotkeys import Action
from anyfill.daemon.desktop.preview import PreviewCommand
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.settings.live import LiveSettings

if TYPE_CHECKING:
    from anyfill.daemon.backends.base import Backend
    from anyfill.daemon.desktop.pipeline import Pipeline
    from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
    from anyfill.daemon.managed.events import ManagedServerChanged

log = logging.getLogger("anyfill.core")

INSERT_MODES: tuple[InsertMode, ...] = ("paste", "preview", "type")
State = Literal["paused", "working", "idle"]


class PreviewPort(Protocol):
    def command(self, command: PreviewCommand) -> bool:
        """Act on the visible preview; False when none is visible."""
        ...


class Core:
    """Commands of the running daemon. ``pipeline`` and ``preview`` are attached once the
    desktop is open; before that (or without a desktop) only the switches work."""

    def __init__(
        self, settings: Settings | LiveSettings, bus: EventBus, config_path: Path | None = None
    ) -> None:
        self.live = settings if isinstance(settings, LiveSettings) else LiveSettings(settings)
        """The settings in force; parts keep a reader of it, never a copy."""
        self.bus = bus
        self.config_path = config_path
        """The file watched for changes (``None``: the default path)."""
        self._paused = False
        self.suggestions_paused = False
        """The tray's one-click pause of suggestions as you type (the hotkeys go on)."""
        self.pipeline: Pipeline | None = None
        self.preview: PreviewPort | None = None
        self.ui = ""
        """The attached front end ("tray"), empty when headless."""
        self.ui_status: dict[str, Any] = {}
        """What the front end reports about itself for ``anyfill status``."""
        self.backends: Callable[[], Mapping[str, Backend]] = dict
        """The backends of the engine in force (set by whoever builds the engine)."""
        self.desktop = ""
        """The desktop route in use (``x11``, ``wayland``), empty without a desktop."""
        self.started = time.time()

    @property
    def settings(self) -> Settings:
        return self.live.current

    @settings.setter
    def settings(self, new: Settings) -> None:
        self.live.replace(new)

    def attach(self, pipeline: Pipeline | None, preview: PreviewPort | None) -> None:
        """The desktop path is up (or, with None, down); a pause chosen before holds."""
        self.pipeline, self.preview = pipeline, preview
        if pipeline is not None:
            pipeline.paused = self._paused

    @property
    def paused(self) -> bool:
        return self.pipeline.paused if self.pipeline is not None else self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        if self.pipeline is not None:
            self.pipeline.paused = value

    # -- state ------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.pipeline is not None and self.pipeline.busy

    @property
    def state(self) -> State:
        return "paused" if self.paused else "working" if self.busy else "idle"

    @property
    def history(self) -> Sequence[PressFinished]:
        """The last presses, oldest first (no captured text, only the completions)."""
        return tuple(self.pipeline.history) if self.pipeline is not None else ()

    def status(self) -> DaemonStatus:
        enabled = tuple(b.name for b in self.settings.backends if b.enabled)
        return DaemonStatus(
            paused=self.paused,
            insert_mode=self.settings.insert.mode,
            chain=tuple(self.settings.routing.default),
            backends=enabled,
            suggestions=self._suggestions_state(),
        )

    def _suggestions_state(self) -> str:
        settings = self.settings
        if not (settings.suggestions.auto or any(r.suggest for r in settings.insert.apps)):
            return "off"
        return "paused" if self.suggestions_paused or self.paused else "on"

    def announce(self) -> DaemonStatus:
        status = self.status()
        self.bus.publish(status)
        return status

    def show_window(self, window: str) -> None:
        """Ask the front end to open one of its windows (``settings``, ``diagnostics``)."""
        self.bus.publish(ShowWindow(window))

    # -- switches ---------------------------------------------------------------------

    def pause(self) -> DaemonStatus:
        """Hotkeys stop starting completions (the cancel hotkey still works)."""
        if not self.paused:
            self.paused = True
            log.info("paused: hotkeys start no completion until resumed")
            self.cancel()
        return self.announce()

    def resume(self) -> DaemonStatus:
        if self.paused:
            self.paused = False
            log.info("resumed")
        return self.announce()

    def pause_suggestions(self, paused: bool) -> DaemonStatus:
        """Pause or resume suggestions as you type; the hotkeys keep working."""
        if paused != self.suggestions_paused:
            self.suggestions_paused = paused
            log.info("suggestions as you type %s", "paused" if paused else "resumed")
        return self.announce()

    def set_insert_mode(self, mode: str) -> DaemonStatus:
        if mode not in INSERT_MODES:
            raise ConfigError(f"insert mode {mode!r} is not one of {', '.join(INSERT_MODES)}")
        self.settings.insert.mode = mode  # pydantic validates the assignment too
        log.info("insert mode: %s", mode)
        return self.announce()

    def set_first_backend(self, name: str) -> DaemonStatus:
        """Ask ``name`` first; the rest of the chain keeps its order behind it."""
        known = [b.name for b in self.settings.backends if b.enabled]
        if name not in known:
            raise ConfigError(f"no enabled backend named {name!r} (enabled: {', '.join(known)})")
        chain = [name, *(b for b in self.settings.routing.default if b != name)]
        self.settings.routing.default = chain
        log.info("backends in order: %s", ", ".join(chain))
        return self.announce()

    # -- managed llama-servers ----------------------------------------------------------

    def _managed(self) -> dict[str, ManagedLlamaCppBackend]:
        from anyfill.daemon.managed.backend import ManagedLlamaCppBackend

        return {
            name: backend
            for name, backend in self.backends().items()
            if isinstance(backend, ManagedLlamaCppBackend)
        }

    def managed_servers(self) -> list[ManagedServerChanged]:
        """The last published state of each managed server (for a listener that starts
        after the events went by)."""
        return [backend.supervisor.last_event for backend in self._managed().values()]

    async def download_model(self, backend: str) -> Path:
        """Download the catalogue model of managed backend ``backend`` (the user agreed),
        publishing ``ModelDownload`` progress; its server starts once the file is verified.
        Cancelling the call stops the download and keeps the partial file for a resume."""
        managed = self._managed()
        if backend not in managed:
            names = ", ".join(managed) or "none"
            raise ConfigError(f"no managed llama.cpp backend named {backend!r} (managed: {names})")
        return await managed[backend].download_model()

    # -- presses ----------------------------------------------------------------------

    def trigger(self, action: Action) -> None:
        """A hotkey press: the hotkey source, the control socket and MQTT all call this, so
        every press takes the same path (released keys, focus target, capture, guard)."""
        if self.pipeline is not None:
            self.pipeline.trigger(action)

    async def press(self, action: Action, *, wait: bool = False) -> PressFinished | None:
        """:meth:`trigger`; with ``wait``, the outcome of the press it started (None when it
        started none). A caller that goes away does not cancel the press."""
        pipeline = self.pipeline
        before = pipeline.current if pipeline is not None else None
        self.trigger(action)
        task = pipeline.current if pipeline is not None else None
        if not wait or action == "cancel" or task is None or task is before:
            return None
        await asyncio.wait([task])  # not `await task`: the caller's cancellation stays its own
        if task.cancelled():
            return PressFinished(action, "cancelled", "cancelled")
        return task.result()

    def cancel(self) -> None:
        """Stop the running completion (and close its preview)."""
        if self.pipeline is not None:
            self.pipeline.cancel()

    def preview_command(self, command: PreviewCommand) -> bool:
        """Accept, dismiss or cycle the visible preview; False when none is visible."""
        if self.preview is None:
            return False
        return self.preview.command(command)

    def accept(self) -> bool:
        return self.preview_command("accept")

    def dismiss(self) -> bool:
        return self.preview_command("dismiss")

    def cycle(self, step: int = 1) -> bool:
        return self.preview_command("next" if step >= 0 else "previous")

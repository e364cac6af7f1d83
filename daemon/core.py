"""The running daemon's command interface: what the tray (and the control socket) may ask.

Every method runs on the core's asyncio loop thread (the Qt side goes through
``anyfill.ui.bridge``). Commands change the live settings the pipeline reads at each
press, and announce the result as a :class:`DaemonStatus` on the bus.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from anyfill.config.model import InsertMode, Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import DaemonStatus, ShowWindow
from anyfill.daemon.control.commands import Commands
from anyfill.daemon.errors import ConfigError

if TYPE_CHECKING:
    from anyfill.daemon.backends.base import Backend
    from anyfill.daemon.desktop.pipeline import Pipeline
    from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
    from anyfill.daemon.managed.events import ManagedServerChanged

log = logging.getLogger("anyfill.core")

INSERT_MODES: tuple[InsertMode, ...] = ("paste", "preview", "type")
PreviewCommand = Literal["accept", "dismiss", "next", "previous"]
PREVIEW_COMMANDS: tuple[PreviewCommand, ...] = ("accept", "dismiss", "next", "previous")


class PreviewPort(Protocol):
    def command(self, command: PreviewCommand) -> bool:
        """Act on the visible preview; False when none is visible."""
        ...


class Core:
    """Commands of the running daemon. ``pipeline`` and ``preview`` are attached once the
    desktop is open; before that (or without a desktop) only the switches work."""

    def __init__(self, settings: Settings, bus: EventBus, config_path: Path | None = None) -> None:
        self.settings = settings
        self.bus = bus
        self.config_path = config_path
        """The file watched for changes (``None``: the default path)."""
        self._paused = False
        self.pipeline: Pipeline | None = None
        self.preview: PreviewPort | None = None
        self.ui = ""
        """The attached front end ("tray"), empty when headless."""
        self.ui_status: dict[str, Any] = {}
        """What the front end reports about itself for ``anyfill status``."""
        self.backends: Callable[[], Mapping[str, Backend]] = dict
        """The backends of the engine in force (set by whoever builds the engine)."""

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

    def install_commands(self, commands: Commands) -> None:
        """Control-socket commands that go through the core, so the tray hears of them."""
        commands.register(
            "pause",
            lambda _: self._state(self.pause()),
            replace=True,
            summary="ignore hotkey presses until resume",
        )
        commands.register(
            "resume",
            lambda _: self._state(self.resume()),
            replace=True,
            summary="act on hotkey presses again",
        )
        if not self.ui:
            return
        commands.ui = self.ui
        commands.add_status_section(self.ui, lambda: dict(self.ui_status))
        commands.register(
            "preview",
            self._preview_control,
            summary="accept, dismiss or cycle the visible preview: "
            "{command: accept|dismiss|next|previous}",
        )
        for window in ("settings", "diagnostics"):
            commands.register(
                f"show-{window}",
                partial(self._show, window),
                summary=f"open the {window} window of the running anyfill",
            )

    def _state(self, status: DaemonStatus) -> dict[str, Any]:
        busy = self.pipeline is not None and self.pipeline.busy
        return {"state": "paused" if status.paused else "working" if busy else "idle"}

    def _preview_control(self, args: dict[str, Any]) -> dict[str, Any]:
        from anyfill.daemon.control.commands import require_choice

        command = require_choice(args, "command", PREVIEW_COMMANDS)
        return {"done": self.preview_command(command)}  # type: ignore[arg-type]

    def _show(self, window: str, args: dict[str, Any]) -> dict[str, Any]:
        self.bus.publish(ShowWindow(window))
        return {"shown": window}

    # -- state ------------------------------------------------------------------------

    def status(self) -> DaemonStatus:
        enabled = tuple(b.name for b in self.settings.backends if b.enabled)
        return DaemonStatus(
            paused=self.paused,
            insert_mode=self.settings.insert.mode,
            chain=tuple(self.settings.routing.default),
            backends=enabled,
        )

    def announce(self) -> DaemonStatus:
        status = self.status()
        self.bus.publish(status)
        return status

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

    # -- the running completion -------------------------------------------------------

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

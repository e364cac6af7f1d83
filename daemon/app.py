"""The composition root: builds the daemon from the settings and owns start and stop.

``anyfill run --headless``: hotkeys, capture, completion and insertion, no tray.
The desktop is opened first so a missing display fails at once with a clear message.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from importlib import metadata
from pathlib import Path
from typing import Any

from anyfill.config.model import CaptureStrategy, Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import Problem
from anyfill.daemon.capture.accessibility import AccessibilityCapture
from anyfill.daemon.capture.base import Strategy
from anyfill.daemon.capture.clipboard_mode import ClipboardCapture
from anyfill.daemon.capture.keyboard import KeyboardCapture
from anyfill.daemon.completion import Completer
from anyfill.daemon.control.builtins import DaemonControl, install_builtins
from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.core import Core
from anyfill.daemon.desktop import Desktop
from anyfill.daemon.errors import DesktopUnavailable
from anyfill.daemon.heap import freeze_startup_objects
from anyfill.daemon.hotkeys import Action, bindings_from
from anyfill.daemon.log import setup_logging
from anyfill.daemon.pipeline import Pipeline
from anyfill.daemon.preview import PreviewController
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.app")

CompleterFactory = Callable[[Settings, EventBus], Any]
"""Builds an async context manager that is (or yields) a Completer publishing on the bus."""


def open_desktop(
    settings: Settings, on_trigger: Callable[[Action], None]
) -> AbstractAsyncContextManager[Desktop]:
    """The platform's desktop: native Wayland or X11 on Linux, chosen from the session."""
    bindings = bindings_from(
        settings.hotkeys.complete, settings.hotkeys.preview, settings.hotkeys.cancel
    )
    if sys.platform.startswith("linux") and desktop_kind() == "wayland":
        from anyfill.daemon.wayland.desktop import WaylandDesktop

        return WaylandDesktop(bindings, on_trigger)
    if sys.platform.startswith("linux"):
        from anyfill.daemon.x11.desktop import X11Desktop

        return X11Desktop(bindings, on_trigger)
    raise DesktopUnavailable(
        f"the desktop path (hotkeys, capture, insertion) is not implemented on {sys.platform} yet"
    )


def desktop_kind() -> str:
    from anyfill.daemon.wayland.session import is_wayland

    return "wayland" if is_wayland() else "x11"


def capture_strategies(desktop: Desktop, settings: Settings) -> dict[CaptureStrategy, Strategy]:
    strategies: dict[CaptureStrategy, Strategy] = {
        "keyboard": KeyboardCapture(desktop, settings.capture),
        "clipboard": ClipboardCapture(desktop, settings.capture),
    }
    accessibility = AccessibilityCapture(settings.capture)
    if accessibility.unavailable:
        if "accessibility" in settings.capture.strategies:
            log.info("accessibility capture is off: %s", accessibility.unavailable)
    else:
        strategies["accessibility"] = accessibility
    return strategies


def default_completer(settings: Settings, bus: EventBus | None = None) -> Any:
    from anyfill.daemon.engine import Engine
    from anyfill.daemon.scheduler.attempt_log import log_attempts

    bus = bus if bus is not None else EventBus()  # metrics and cooldowns for the tray, MQTT
    log_attempts(bus)
    return Engine(settings, bus=bus)


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    completer_factory: CompleterFactory = default_completer,
    *,
    commands: Commands | None = None,
    control_socket: str | None = None,
) -> None:
    """Run headless until ``stop`` is set (see :func:`serve_core`)."""
    await serve_core(
        Core(settings, EventBus()),
        stop,
        completer_factory=completer_factory,
        commands=commands,
        control_socket=control_socket,
    )


async def serve_core(
    core: Core,
    stop: asyncio.Event,
    ready: Callable[[], None] | None = None,
    *,
    completer_factory: CompleterFactory = default_completer,
    preview: bool = False,
    commands: Commands | None = None,
    control_socket: str | None = None,
) -> None:
    """Run the desktop path around ``core`` until ``stop`` is set.

    ``ready`` is called once the hotkeys are grabbed and the backends built. ``preview``: a
    window shows previews (the tray); headless, the preview hotkey inserts directly.
    ``commands``: the control socket's registry, for a layer (the tray) that adds its own
    commands; the built-in ones are added here. ``control_socket``: its path (default
    ``$XDG_RUNTIME_DIR/anyfill/control.sock``).
    """
    settings = core.settings
    pipelines: list[Pipeline] = []

    def on_trigger(action: Action) -> None:
        for pipeline in pipelines:
            pipeline.trigger(action)

    commands = commands if commands is not None else Commands()
    # Bound first: a live daemon on the socket stops us before we grab its hotkeys.
    async with (
        ControlServer(commands, control_socket) as control,
        open_desktop(settings, on_trigger) as desktop,
    ):
        manager = completer_factory(settings, core.bus)
        async with manager as entered:
            completer: Completer = entered if entered is not None else manager
            starting = _start_managed_servers(completer, settings)
            previewer = None
            if preview and desktop.preview_input is not None:
                previewer = PreviewController(desktop, settings, core.bus)
            pipeline = Pipeline(
                desktop,
                completer,
                settings,
                capture_strategies(desktop, settings),
                bus=core.bus,
                preview=previewer,
            )
            core.attach(pipeline, previewer)
            for problem in desktop.problems:
                fix = "choose another combination in [hotkeys], or quit the program holding it"
                core.bus.publish(Problem(f"hotkey_taken:{problem}", problem, fix))
            pipelines.append(pipeline)
            install_builtins(
                commands, DaemonControl(settings, pipeline, on_trigger, desktop=desktop_kind())
            )
            core.install_commands(commands)
            await control.start_serving()
            freeze_startup_objects()
            chain = ", ".join(settings.routing.default)
            log.info("anyfill is running; backends in order: %s", chain)
            if ready is not None:
                ready()
            try:
                await first_set(stop, desktop.lost)
            finally:
                pipelines.clear()
                core.attach(None, None)
                await pipeline.aclose()
                if starting is not None:
                    starting.cancel()
            if desktop.lost.is_set() and not stop.is_set():
                raise DesktopUnavailable("the connection to the display was lost")
    log.info("anyfill stopped")


def _start_managed_servers(completer: object, settings: Settings) -> asyncio.Task[None] | None:
    """Start the managed llama-servers in the background, so the first completion finds the
    model loaded (the engine stops them when it closes)."""
    backends = getattr(completer, "backends", None)
    if not backends:
        return None
    from anyfill.daemon.managed.prestart import start_managed_servers

    return asyncio.create_task(start_managed_servers(backends, settings), name="managed-start")


def run_daemon(
    settings: Settings,
    *,
    headless: bool,
    debug: bool = False,
    config_path: Path | None = None,
) -> int:
    """Run until stopped: with the tray (the ``anyfill.frontends`` entry point ``tray``,
    provided by ``anyfill.ui``; the core never imports Qt itself) unless ``headless``."""
    path = setup_logging(
        level="DEBUG" if debug else settings.logging.level,
        to_file=settings.logging.file,
        max_bytes=settings.logging.max_bytes,
        backups=settings.logging.backups,
        log_text=settings.privacy.log_text,
    )
    if path:
        log.info("logging to %s", path)
    if not headless and sys.platform.startswith("linux") and not display_reachable():
        # Qt aborts the process when it cannot connect to the display: without one, the
        # core's own start says why in one line instead.
        headless = True
    if not headless:
        frontend = load_frontend("tray")
        if frontend is not None:
            from anyfill.config.store import default_config_path

            return int(frontend(settings, config_path or default_config_path()))
        log.warning("the tray is not installed (anyfill.ui); running headless")
    asyncio.run(_main(settings))
    return 0


def display_reachable() -> bool:
    """True when the display the desktop path uses answers a connection (Wayland: its
    socket; X11: the X server), checked without Qt."""
    if desktop_kind() == "wayland":
        name = os.environ.get("WAYLAND_DISPLAY", "")
        path = (
            Path(name)
            if name.startswith("/")
            else Path(os.environ.get("XDG_RUNTIME_DIR", ""), name)
        )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                return False
        return True
    if not os.environ.get("DISPLAY"):
        return False
    from Xlib import display, error

    try:
        display.Display().close()
    except (error.DisplayError, OSError):
        return False
    return True


def load_frontend(name: str) -> Callable[[Settings, Path], int] | None:
    """The front end registered under ``name`` in the ``anyfill.frontends`` entry points."""
    for entry in metadata.entry_points(group="anyfill.frontends", name=name):
        try:
            frontend: Callable[[Settings, Path], int] = entry.load()
        except ImportError as exc:  # Qt missing or broken: the hotkeys still work
            log.warning("the %s front end cannot load: %s", name, exc)
            return None
        return frontend
    return None


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)

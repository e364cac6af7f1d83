"""The composition root: builds the daemon from the settings and owns start and stop.

``anyfill run --headless``: hotkeys, capture, completion and insertion, no tray.
The desktop is opened first so a missing display fails at once with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from anyfill.config.model import CaptureStrategy, Settings
from anyfill.daemon.capture.accessibility import AccessibilityCapture
from anyfill.daemon.capture.base import Strategy
from anyfill.daemon.capture.clipboard_mode import ClipboardCapture
from anyfill.daemon.capture.keyboard import KeyboardCapture
from anyfill.daemon.completion import Completer
from anyfill.daemon.control.builtins import DaemonControl, install_builtins
from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.desktop import Desktop
from anyfill.daemon.errors import DesktopUnavailable
from anyfill.daemon.heap import freeze_startup_objects
from anyfill.daemon.hotkeys import Action, bindings_from
from anyfill.daemon.log import setup_logging
from anyfill.daemon.pipeline import Pipeline
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.app")

CompleterFactory = Callable[[Settings], Any]
"""Builds an async context manager that is (or yields) a Completer."""


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


def default_completer(settings: Settings) -> Any:
    from anyfill.daemon.bus import EventBus
    from anyfill.daemon.engine import Engine
    from anyfill.daemon.scheduler.attempt_log import log_attempts

    bus = EventBus()  # the scheduler's metrics and cooldowns; the tray and MQTT will listen too
    log_attempts(bus)
    return Engine(settings, bus=bus)


def start_mqtt(
    settings: Settings, completer: Completer, trigger: Callable[[Action], None] | None
) -> asyncio.Task[None] | None:
    """With ``[mqtt]`` enabled, the node's status, events and request API on the broker
    (``anyfill.daemon.mqtt.node``); it reconnects by itself and never stops the daemon."""
    if not settings.mqtt.enabled:
        return None
    from anyfill.daemon.mqtt.connection import spec_from_config
    from anyfill.daemon.mqtt.node import NodeBridge

    def trigger_action(action: str) -> None:
        if trigger is not None and action in ("complete", "preview"):
            trigger("complete" if action == "complete" else "preview")

    bus = getattr(completer, "bus", None)
    backends = getattr(completer, "backends", {})
    unusable = getattr(completer, "unusable", {})
    bridge = NodeBridge(
        completer,
        settings,
        spec_from_config(settings.mqtt),
        bus=bus,
        backends=list(backends),
        unusable={name: str(error) for name, error in unusable.items()},
        trigger=trigger_action if trigger is not None else None,
        version=_version(),
    )
    return asyncio.get_running_loop().create_task(bridge.run(), name="mqtt-node")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("anyfill")
    except metadata.PackageNotFoundError:
        return "0+unknown"


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    completer_factory: CompleterFactory = default_completer,
    *,
    commands: Commands | None = None,
    control_socket: str | None = None,
) -> None:
    """Run until ``stop`` is set.

    ``commands``: the control socket's registry, for a layer (the tray) that adds its own
    commands; the built-in ones are added here. ``control_socket``: its path (default
    ``$XDG_RUNTIME_DIR/anyfill/control.sock``).
    """
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
        manager = completer_factory(settings)
        async with manager as entered:
            completer: Completer = entered if entered is not None else manager
            starting = _start_managed_servers(completer, settings)
            pipeline = Pipeline(desktop, completer, settings, capture_strategies(desktop, settings))
            pipelines.append(pipeline)
            install_builtins(
                commands, DaemonControl(settings, pipeline, on_trigger, desktop=desktop_kind())
            )
            await control.start_serving()
            bridge = start_mqtt(settings, completer, on_trigger)
            freeze_startup_objects()
            chain = ", ".join(settings.routing.default)
            log.info("anyfill is running; backends in order: %s", chain)
            try:
                await first_set(stop, desktop.lost)
            finally:
                pipelines.clear()
                if bridge is not None:
                    bridge.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await bridge
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


def run_daemon(settings: Settings, *, headless: bool, debug: bool = False) -> None:
    path = setup_logging(
        level="DEBUG" if debug else settings.logging.level,
        to_file=settings.logging.file,
        max_bytes=settings.logging.max_bytes,
        backups=settings.logging.backups,
        log_text=settings.privacy.log_text,
    )
    if path:
        log.info("logging to %s", path)
    if not headless:
        log.warning("the tray is not available yet; running headless")
    asyncio.run(_main(settings))


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)

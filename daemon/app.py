"""The composition root: builds the daemon from the settings and owns start and stop.

``anyfill run --headless``: hotkeys, capture, completion and insertion, no tray.
The desktop is opened first so a missing display fails at once with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from importlib import metadata
from pathlib import Path
from typing import Any

from anyfill.config.model import CaptureConfig, CaptureStrategy, Settings
from anyfill.config.store import default_config_path
from anyfill.daemon.atspi.capture import AccessibilityCapture
from anyfill.daemon.backends.leases import Leases
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import BackendsReady, Problem
from anyfill.daemon.completion import Completer
from anyfill.daemon.control.builtins import install_builtins
from anyfill.daemon.control.commands import Commands
from anyfill.daemon.control.server import ControlServer
from anyfill.daemon.core import Core
from anyfill.daemon.desktop.capture.base import Strategy
from anyfill.daemon.desktop.capture.clipboard_mode import ClipboardCapture
from anyfill.daemon.desktop.capture.keyboard import KeyboardCapture
from anyfill.daemon.desktop.hotkeys import Action, bindings_from
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.desktop.ports import Desktop
from anyfill.daemon.desktop.preview import PreviewController
from anyfill.daemon.engine.swappable import SwappableCompleter
from anyfill.daemon.errors import AnyfillError, DesktopUnavailable, RestartNeeded, error_text
from anyfill.daemon.heap import freeze_startup_objects
from anyfill.daemon.log import FILE_ONLY, setup_logging
from anyfill.daemon.settings.live import Reader
from anyfill.daemon.settings.reload import ConfigWatcher, Reloader
from anyfill.daemon.version import version_string
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.app")

CompleterFactory = Callable[[Settings, EventBus, Leases], Any]
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


def capture_strategies(
    desktop: Desktop, capture: Reader[CaptureConfig], settings: Settings
) -> dict[CaptureStrategy, Strategy]:
    """Every capture strategy this desktop can run, each reading ``capture`` when it runs
    (built once: what they learn per app outlives reloads)."""
    strategies: dict[CaptureStrategy, Strategy] = {
        "keyboard": KeyboardCapture(desktop, capture),
        "clipboard": ClipboardCapture(desktop, capture),
    }
    accessibility = AccessibilityCapture(capture)
    if accessibility.unavailable and "accessibility" in settings.capture.strategies:
        log.info("accessibility capture is off for now: %s", accessibility.unavailable)
    # Kept even when AT-SPI is missing now: installed or switched on later, it is used
    # from the next press on (a press meanwhile moves on to the next strategy at once).
    strategies["accessibility"] = accessibility
    return strategies


def load_backend_stack() -> None:
    """What building the default backends needs that is slow to load: the engine, aiohttp
    (it builds its SSL contexts at import) and the keyring's backend. Run in a thread right
    after the hotkeys are live, so neither the start nor the event loop waits for it."""
    from anyfill.config.secrets import load_keyring

    for module in ("anyfill.daemon.engine.engine", "anyfill.daemon.backends.aiohttp_transport"):
        importlib.import_module(module)
    load_keyring()


def default_completer(
    settings: Settings, bus: EventBus | None = None, leases: Leases | None = None
) -> Any:
    from anyfill.daemon.engine.engine import Engine
    from anyfill.daemon.scheduler.attempt_log import log_attempts

    if bus is None:  # metrics and cooldowns for the tray, MQTT; the daemon's bus logs already
        bus = EventBus()
        log_attempts(bus)
    return Engine(settings, bus=bus, leases=leases)


def start_mqtt(
    settings: Settings,
    completer: Completer,
    trigger: Callable[[Action], None] | None,
    *,
    bus: EventBus | None = None,
    current: Callable[[], Settings] | None = None,
) -> asyncio.Task[None] | None:
    """With ``[mqtt]`` enabled, the node's status, events and request API on the broker
    (``anyfill.daemon.mqtt.node``); it reconnects by itself and never stops the daemon.
    ``current``: the settings in force (a reload changes ``privacy.mqtt_text``)."""
    if not settings.mqtt.enabled:
        return None
    from anyfill.config.secrets import resolve_insert_key
    from anyfill.daemon.mqtt.connection import spec_from_config
    from anyfill.daemon.mqtt.node import NodeBridge

    def insert_key() -> str | None:  # read when a request comes: set-key applies at once
        return resolve_insert_key((current() if current else settings).mqtt.insert_key)

    def trigger_action(action: str) -> None:
        if trigger is not None and action in ("complete", "preview"):
            trigger("complete" if action == "complete" else "preview")

    engine = getattr(completer, "current", completer)  # a swappable completer's engine
    bus = bus if bus is not None else getattr(engine, "bus", None)
    # Built already (a completer handed in built), else BackendsReady tells the bridge.
    ready = backends_ready(engine) if engine is not None else None
    bridge = NodeBridge(
        completer,
        settings,
        spec_from_config(settings.mqtt),
        bus=bus,
        backends=ready.backends if ready is not None else None,
        unusable=dict(ready.unusable) if ready is not None else None,
        trigger=trigger_action if trigger is not None else None,
        version=version_string(),
        current=current,
        insert_key=insert_key,
    )
    return asyncio.get_running_loop().create_task(bridge.run(), name="mqtt-node")


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


MQTT_READ_LIVE = frozenset({"allow_remote_insert"})
"""``[mqtt]`` keys the node reads at each request; a change of any other key restarts the
link with the new values (``privacy.mqtt_text`` is read at each message too)."""


class MqttLink:
    """The daemon's MQTT node, restarted when ``[mqtt]`` changes (on, off, another broker,
    node or prefix): every key applies live, none waits for a restart of anyfill."""

    def __init__(self, core: Core, completer: Completer) -> None:
        self._core = core
        self._completer = completer
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        core = self._core
        self._task = start_mqtt(
            core.settings, self._completer, core.trigger, bus=core.bus, current=core.live.get
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await _stop(task)

    async def apply(self, old: Settings, new: Settings) -> None:
        changed = {
            key
            for key in type(new.mqtt).model_fields
            if getattr(old.mqtt, key) != getattr(new.mqtt, key)
        }
        if not changed - MQTT_READ_LIVE:
            return
        log.info("[mqtt] changed (%s): the broker link restarts", ", ".join(sorted(changed)))
        await self.stop()
        self.start()


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    completer_factory: CompleterFactory = default_completer,
    config_path: Path | None = None,
    *,
    commands: Commands | None = None,
    control_socket: str | None = None,
) -> None:
    """Run headless until ``stop`` is set."""
    core = Core(settings, EventBus(), config_path=config_path)
    await serve_core(
        core,
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

    ``ready`` is called once the hotkeys are grabbed; the backends are built after it (in
    the background: a press that comes first waits for them), then ``BackendsReady`` is
    published for whoever shows them (MQTT's status, the tray). ``preview``: a
    window shows previews (the tray); headless, the preview hotkey inserts directly.
    ``commands``: the control socket's registry, for a layer (the tray) that adds its own
    commands; the built-in ones are added here. ``control_socket``: its path (default
    ``$XDG_RUNTIME_DIR/anyfill/control.sock``). ``core.config_path`` is watched: a new valid
    version of the file is applied while running (:mod:`anyfill.daemon.settings.reload`).
    """
    settings = core.settings  # what is opened once from the start-up values
    from anyfill.daemon.scheduler.attempt_log import log_attempts

    log_attempts(core.bus)
    commands = commands if commands is not None else Commands()
    # Bound first: a live daemon on the socket stops us before we grab its hotkeys.
    async with (
        ControlServer(commands, control_socket) as control,
        open_desktop(settings, core.trigger) as desktop,
        SwappableCompleter(completer_factory, core.bus) as completer,
    ):
        core.backends = lambda: getattr(completer.current, "backends", None) or {}
        core.desktop = desktop_kind()
        starting: list[asyncio.Task[None]] = []
        pipeline = _desktop_path(core, desktop, completer, preview=preview)
        suggesting = _suggest_as_you_type(core, pipeline, desktop, completer)
        install_builtins(commands, core)
        mqtt = MqttLink(core, completer)

        async def apply(old: Settings, new: Settings) -> list[AnyfillError]:
            engine_before = completer.current
            notes = await apply_settings(
                core=core, desktop=desktop, completer=completer, mqtt=mqtt, old=old, new=new
            )
            if completer.current is not engine_before:
                _start_managed_servers(completer.current, new, starting)
                core.bus.publish(backends_ready(completer.current))
            return notes

        path = core.config_path or default_config_path()
        reloader = Reloader(path, settings, apply, core.bus, check=check_hotkeys)
        # `anyfill status` names a broken file until it is fixed (the tray shows it too).
        commands.add_status_section(
            "config",
            lambda: "; ".join(reloader.rejected) if reloader.rejected else f"{path}: in force",
        )
        await control.start_serving()
        mqtt.start()
        async with ConfigWatcher(path, reloader.on_text, on_unreadable=reloader.on_unreadable):
            log.info(
                "anyfill is running; backends in order: %s", ", ".join(settings.routing.default)
            )
            if ready is not None:
                ready()
            # The backends (HTTP stack, keyring) are built once the hotkeys are live, not
            # before: a press that comes first waits for them (bench/bench_tray.py times
            # both). Managed llama-servers start in the background after each engine.
            build_failed = asyncio.Event()
            building = _build_backends_soon(core, completer, starting, build_failed)
            try:
                await first_set(stop, desktop.lost, build_failed)
            finally:
                core.attach(None, None)  # no press starts any more
                if suggesting is not None:
                    suggesting.cancel()  # its listener deregisters from the registry
                    await asyncio.wait([suggesting], timeout=2.0)
                await mqtt.stop()
                await pipeline.aclose()
                for task in starting:
                    task.cancel()
        if build_failed.is_set() and not stop.is_set():
            building.result()  # what building the backends raised, as a start failure did
        if desktop.lost.is_set() and not stop.is_set():
            raise DesktopUnavailable("the connection to the display was lost")
    log.info("anyfill stopped")


def _desktop_path(core: Core, desktop: Desktop, completer: Completer, *, preview: bool) -> Pipeline:
    """The pipeline (with the preview popup's controller when a window shows it), attached
    to the core; what the desktop could not take is announced on the bus. Everything here
    is built once and reads ``core.live``: a reload keeps what the strategies learned."""
    live = core.live
    previewer = None
    if preview and desktop.preview_input is not None:
        previewer = PreviewController(desktop, live.get, core.bus)
    pipeline = Pipeline(
        desktop,
        completer,
        live.get,
        capture_strategies(desktop, live.section("capture"), live.current),
        bus=core.bus,
        preview=previewer,
    )
    core.attach(pipeline, previewer)
    for taken in desktop.problems:
        fix = "choose another combination in [hotkeys], or quit the program holding it"
        core.bus.publish(Problem(f"hotkey_taken:{taken.hotkey}", str(taken), fix))
    return pipeline


def _suggest_as_you_type(
    core: Core, pipeline: Pipeline, desktop: Desktop, completer: Completer
) -> asyncio.Task[None] | None:
    """The suggester, where a window shows previews; it listens only while wanted."""
    if not pipeline.previews:
        return None
    from anyfill.daemon.desktop.suggest.driver import Suggester

    suggester = Suggester(
        core.live.get, pipeline, desktop, completer, paused=lambda: core.suggestions_paused
    )
    return asyncio.get_running_loop().create_task(suggester.run(), name="suggester")


def _build_backends_soon(
    core: Core,
    completer: SwappableCompleter,
    starting: list[asyncio.Task[None]],
    failed: asyncio.Event,
) -> asyncio.Task[None]:
    """Build the first engine in the background; then start its managed servers, freeze
    the start-up objects out of the collector's sight and publish ``BackendsReady``; or
    set ``failed`` (the daemon stops with the error, as when the engine was built before
    the hotkeys)."""

    def built(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:
            failed.set()
            return
        _start_managed_servers(completer.current, core.settings, starting)
        _freeze_when_quiet(core)  # now that the long-lived objects exist (clients too)
        ready = backends_ready(completer.current)
        log.info("backends built: %s", ", ".join(ready.backends) or "none")
        log.debug("backends built at %.6f", time.monotonic())  # bench/bench_tray.py
        core.bus.publish(ready)

    building = completer.start_soon(core.settings, prepare=load_backend_stack)
    building.add_done_callback(built)
    return building


FREEZE_AFTER_S = 1.0


def _freeze_when_quiet(core: Core) -> None:
    """Freeze the start-up objects (``heap``) a moment after the build, when no press
    runs: its full collection takes ~0.1 s with Qt loaded, and a press that waited for
    the build must not wait for that too."""
    loop = asyncio.get_running_loop()

    def attempt() -> None:
        if core.pipeline is not None and core.pipeline.busy:
            loop.call_later(FREEZE_AFTER_S, attempt)
            return
        freeze_startup_objects()

    loop.call_later(FREEZE_AFTER_S, attempt)


def backends_ready(engine: object) -> BackendsReady:
    """What ``engine`` built (nothing yet when it is not built)."""
    backends = getattr(engine, "backends", None) or {}
    unusable = getattr(engine, "unusable", None) or {}
    return BackendsReady(
        tuple(backends), tuple((name, str(error)) for name, error in unusable.items())
    )


def _start_managed_servers(
    completer: object, settings: Settings, tasks: list[asyncio.Task[None]]
) -> None:
    """Start the managed llama-servers in the background, so the first completion finds the
    model loaded (the engine stops them when it closes)."""
    backends = getattr(completer, "backends", None)
    if not backends:
        return
    from anyfill.daemon.managed.prestart import start_managed_servers

    tasks[:] = [task for task in tasks if not task.done()]
    tasks.append(
        asyncio.create_task(start_managed_servers(backends, settings), name="managed-start")
    )


def check_hotkeys(settings: Settings) -> None:
    """What the models cannot see: two actions on one combination (raises ConfigError)."""
    bindings_from(settings.hotkeys.complete, settings.hotkeys.preview, settings.hotkeys.cancel)


async def apply_settings(
    *,
    core: Core,
    desktop: Desktop,
    completer: SwappableCompleter,
    mqtt: MqttLink | None = None,
    old: Settings,
    new: Settings,
) -> list[AnyfillError]:
    """Put ``new`` in force while running; returns what could not be applied as written.

    Every part reads the settings in force (``core.live``), so only real work is done
    here: a new engine, rebound hotkeys, the log set up again, the MQTT link restarted."""
    notes: list[AnyfillError] = []
    # First what may fail (building clients): a failure then leaves the old settings whole.
    if (new.backends, new.routing, new.completion) != (old.backends, old.routing, old.completion):
        await completer.replace(new)  # requests in flight finish on the old backends
    if new.hotkeys != old.hotkeys and desktop.hotkeys is None:
        # e.g. Wayland's GlobalShortcuts portal: the desktop holds them, not anyfill.
        notes = [
            RestartNeeded(
                "hotkeys",
                "the hotkeys cannot change while anyfill runs here: restart it to use them",
            )
        ]
        log.warning("%s", notes[0])
    elif new.hotkeys != old.hotkeys and desktop.hotkeys is not None:
        notes = [
            *desktop.hotkeys.rebind(
                bindings_from(new.hotkeys.complete, new.hotkeys.preview, new.hotkeys.cancel)
            )
        ]
        # The settings in force say which combinations are really grabbed.
        for action, hotkey in desktop.hotkeys.in_force().items():
            setattr(new.hotkeys, action, str(hotkey))
    if (new.logging, new.privacy.log_text) != (old.logging, old.privacy.log_text):
        configure_logging(new)
    core.settings = new  # every reader sees it from here on
    if mqtt is not None:
        await mqtt.apply(old, new)
    core.announce()
    return notes


def configure_logging(settings: Settings) -> Path | None:
    """The log as ``[logging]`` and ``privacy.log_text`` say (``--debug`` keeps DEBUG)."""
    return setup_logging(
        level="DEBUG" if _debug else settings.logging.level,
        to_file=settings.logging.file,
        max_bytes=settings.logging.max_bytes,
        backups=settings.logging.backups,
        log_text=settings.privacy.log_text,
    )


_debug = False
"""``anyfill --debug``: DEBUG logs whatever the file says, also after a reload."""


def run_daemon(
    settings: Settings, *, headless: bool, debug: bool = False, config_path: Path | None = None
) -> int:
    """Run until stopped: with the tray (the ``anyfill.frontends`` entry point ``tray``,
    provided by ``anyfill.ui``; the core never imports Qt itself) unless ``headless``."""
    global _debug  # noqa: PLW0603 - one process-wide switch from the command line
    _debug = debug
    if config_path is not None:
        # Every part that asks for the default path (the tray's core, a settings panel it
        # starts) then watches and edits the file this daemon was started with.
        os.environ["ANYFILL_CONFIG"] = str(config_path)
    path = configure_logging(settings)
    if path:
        log.info("logging to %s", path)
    if not headless and sys.platform.startswith("linux") and not display_reachable():
        # Qt aborts the process when it cannot connect to the display: without one, the
        # core's own start says why in one line instead.
        headless = True
    if not headless:
        frontend = load_frontend("tray")
        if frontend is not None:
            return int(frontend(settings, config_path or default_config_path()))
        log.warning("the tray is not installed (anyfill.ui); running headless")
    try:
        asyncio.run(_main(settings, config_path))
    except AnyfillError as exc:  # no display, hotkey taken...: the log file says so too
        log.error("anyfill could not run: %s", error_text(exc), extra=FILE_ONLY)
        raise
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


async def _main(settings: Settings, config_path: Path | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop, config_path=config_path)

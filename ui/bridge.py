"""The one crossing between Qt and the asyncio core.

Qt owns the main thread. The core (desktop, pipeline, engine, scheduler) runs on its own
asyncio loop in a second thread, so painting never delays a capture, a paste or a
clipboard answer. Only this module crosses:

- core → Qt: every event published on the core's bus is re-emitted as :attr:`CoreBridge.core_event`;
  the signal is emitted on the core thread and Qt queues it to the GUI thread.
- Qt → core: :meth:`CoreBridge.submit` runs a coroutine on the core loop
  (``asyncio.run_coroutine_threadsafe``), :meth:`CoreBridge.call` runs a function with the
  :class:`~anyfill.daemon.core.Core` there; both return a ``concurrent.futures.Future``, and
  :meth:`CoreBridge.then` hands its result back on the GUI thread.

Widgets never touch core objects; they get events (frozen dataclasses) and futures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Signal, Slot

from anyfill.config.model import Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import DaemonStatus
from anyfill.daemon.core import Core
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.ui.gc_guard import collect_on_gui_thread

log = logging.getLogger("anyfill.ui.bridge")

T = TypeVar("T")

CoreRunner = Callable[[Core, asyncio.Event, Callable[[], None]], Awaitable[None]]
"""Runs the daemon around ``core`` until the event is set; calls the third argument once
the hotkeys are live. The default is :func:`anyfill.daemon.app.serve_core`."""


class CoreBridge(QObject):
    """Starts the core on its own thread and carries events and commands across.

    Signals (all delivered on the GUI thread):

    - ``core_event(object)``: every bus event, in publish order;
    - ``ready(object)``: the core is serving (hotkeys grabbed); carries a ``DaemonStatus``;
    - ``stopped(str)``: the core ended; an empty string when asked to stop, else why it
      ended (no display, hotkey taken, ...).
    """

    core_event = Signal(object)
    ready = Signal(object)
    stopped = Signal(str)
    _deliver = Signal(object, object)

    def __init__(
        self,
        settings: Settings,
        runner: CoreRunner | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self._runner = runner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._core: Core | None = None
        self._started = threading.Event()
        self._serving = False
        self.stop_error: BaseException | None = None
        """What the core raised when it stopped on an error (``stopped`` says it in words)."""
        self._deliver.connect(self._run_delivery)

    @property
    def settings(self) -> Settings:
        """The settings in force (a reload replaces the object). Read them in the GUI for
        display only; change them only through commands or by saving the file."""
        core = self._core
        return core.settings if core is not None else self._settings

    # -- lifecycle --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True from ``start`` until the core loop ended (before ``stopped`` is emitted)."""
        return self._serving

    def start(self) -> None:
        """Start the core thread; returns once its loop runs (``ready`` comes later)."""
        if self._thread is not None:
            raise RuntimeError("the core was already started")
        # From now on a garbage Qt object must never be freed on the core's thread.
        collect_on_gui_thread()
        self._thread = threading.Thread(target=self._thread_main, name="anyfill-core", daemon=True)
        self._serving = True
        self._thread.start()
        self._started.wait()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Ask the core to stop (hotkeys released, clipboard handed over) and wait for it;
        False when it did not end within ``timeout_s``."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if thread is None:
            return True
        if loop is not None and stop is not None and not loop.is_closed():
            # The loop may close meanwhile: then the thread is ending anyway.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)
        return not thread.is_alive()

    def _thread_main(self) -> None:
        message = ""
        try:
            asyncio.run(self._core_main())
        except Exception as exc:  # noqa: BLE001 - the core ended on an error: the GUI says why
            log.error("the core stopped: %s", exc)
            message = str(exc) or type(exc).__name__
            self.stop_error = exc
        finally:
            self._serving = False
            self._started.set()
        self.stopped.emit(message)

    async def _core_main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        bus = EventBus()
        core = Core(self._settings, bus)
        core.ui = "tray"
        self._core = core
        bus.listen(self.core_event.emit)
        self._started.set()
        runner = self._runner
        if runner is None:
            from anyfill.daemon.app import serve_core

            runner = partial(serve_core, preview=True)

        def on_ready() -> None:
            self.ready.emit(core.announce())

        try:
            await runner(core, self._stop, on_ready)
        finally:
            self._core = None

    # -- crossing into the core ----------------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the core loop (e.g. a backend test); never blocks the GUI."""
        loop = self._loop
        if loop is None or loop.is_closed() or not self.running:
            coro.close()
            failed: concurrent.futures.Future[T] = concurrent.futures.Future()
            failed.set_exception(RuntimeError("the anyfill core is not running"))
            return failed
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def call(self, fn: Callable[[Core], T]) -> concurrent.futures.Future[T]:
        """Run ``fn(core)`` on the core loop thread; the future holds its result."""

        async def on_loop() -> T:
            core = self._core
            if core is None:
                raise RuntimeError("the anyfill core is not running")
            return fn(core)

        return self.submit(on_loop())

    def then(
        self,
        future: concurrent.futures.Future[T],
        on_result: Callable[[T], None],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Call ``on_result(value)`` (or ``on_error(exc)``) on the GUI thread when done."""

        def done(fut: concurrent.futures.Future[T]) -> None:
            self._deliver.emit((on_result, on_error), fut)

        future.add_done_callback(done)

    @Slot(object, object)
    def _run_delivery(self, callbacks: Any, future: concurrent.futures.Future[Any]) -> None:
        on_result, on_error = callbacks
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            on_result(future.result())
        elif on_error is not None:
            on_error(error)
        else:
            log.warning("a command failed: %s", error)

    # -- the command interface (each returns a Future; results are DaemonStatus / bool) --

    def pause(self) -> concurrent.futures.Future[DaemonStatus]:
        return self.call(Core.pause)

    def resume(self) -> concurrent.futures.Future[DaemonStatus]:
        return self.call(Core.resume)

    def pause_suggestions(self, paused: bool) -> concurrent.futures.Future[DaemonStatus]:
        return self.call(lambda core: core.pause_suggestions(paused))

    def cancel(self) -> concurrent.futures.Future[None]:
        return self.call(Core.cancel)

    def accept(self) -> concurrent.futures.Future[bool]:
        return self.call(Core.accept)

    def dismiss(self) -> concurrent.futures.Future[bool]:
        return self.call(Core.dismiss)

    def cycle(self, step: int = 1) -> concurrent.futures.Future[bool]:
        return self.call(lambda core: core.cycle(step))

    def set_insert_mode(self, mode: str) -> concurrent.futures.Future[DaemonStatus]:
        return self.call(lambda core: core.set_insert_mode(mode))

    def set_first_backend(self, name: str) -> concurrent.futures.Future[DaemonStatus]:
        return self.call(lambda core: core.set_first_backend(name))

    def status(self) -> concurrent.futures.Future[DaemonStatus]:
        return self.call(Core.status)

    def managed_servers(self) -> concurrent.futures.Future[list[ManagedServerChanged]]:
        """The last state of each managed llama-server (events sent before we listened)."""
        return self.call(Core.managed_servers)

    def download_model(self, backend: str) -> concurrent.futures.Future[Path]:
        """Download managed ``backend``'s model (ask the user first); ``ModelDownload``
        events report progress. Cancelling the future stops it and keeps the partial file."""

        async def on_loop() -> Path:
            core = self._core
            if core is None:
                raise RuntimeError("the anyfill core is not running")
            return await core.download_model(backend)

        return self.submit(on_loop())

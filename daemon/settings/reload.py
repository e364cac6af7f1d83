"""Settings that take effect while anyfill runs: the config file is watched and re-applied.

- :class:`ConfigWatcher` notices a new version of the file (the panel's atomic rename and a
  text editor's save alike) by polling its identity; a stat every few hundred milliseconds
  costs nothing and needs no platform notification API.
- :class:`SwappableCompleter` is the completer the pipeline holds: new settings build a
  new engine (backends and scheduler); requests already running finish on the engine they
  started on, which is closed once the last of them is done; the next request uses the new
  one.
- :class:`Reloader` validates the new text exactly as ``anyfill config validate`` does. A
  bad file changes nothing: the last good settings stay, and the problems (file:line: key:
  problem) go to the log and, as :class:`SettingsRejected` and a ``Problem``, to the bus
  (the tray shows them) until a good version arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from anyfill.config.model import Settings
from anyfill.config.store import InvalidConfig, parse_settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import Problem
from anyfill.daemon.completion import Completer, Completion, CompletionRequest, OnChunk
from anyfill.daemon.errors import ConfigError

log = logging.getLogger("anyfill.reload")

#: How often the file's identity is checked; a change is read once it held still this long.
POLL_S = 0.25


@dataclass(frozen=True)
class SettingsApplied:
    """A new version of the config file is in force."""

    path: str
    changed: tuple[str, ...]
    """The top-level sections that changed, e.g. ``("backends", "hotkeys")``."""
    notes: tuple[str, ...] = ()
    """What could not be applied as written (a taken hotkey kept its old combination)."""

    @property
    def topic(self) -> str:
        return "events/settings/applied"


@dataclass(frozen=True)
class SettingsRejected:
    """The config file on disk is invalid; the last good settings stay in force."""

    path: str
    problems: tuple[str, ...]
    """Each as ``file:line: key: problem``, the words of ``anyfill config validate``."""

    @property
    def topic(self) -> str:
        return "events/settings/rejected"


FileId = tuple[int, int, int]


def file_id(path: Path) -> FileId | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class ConfigWatcher:
    """Calls ``on_text`` with the file's text each time a new version of it settled."""

    def __init__(
        self,
        path: Path,
        on_text: Callable[[str], Awaitable[None]],
        *,
        poll_s: float = POLL_S,
    ) -> None:
        self.path = path
        self._on_text = on_text
        self._poll_s = poll_s
        self._seen = file_id(path)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ConfigWatcher:
        self._task = asyncio.create_task(self._watch(), name="anyfill-config-watch")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            current = file_id(self.path)
            if current == self._seen:
                continue
            # An editor may write in several steps: read once the file held still.
            await asyncio.sleep(self._poll_s)
            if file_id(self.path) != current:
                continue
            self._seen = current
            if current is None:
                log.warning("%s was removed; the settings in force stay", self.path)
                continue
            try:
                text = self.path.read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                log.error(
                    "%s: cannot read the file: %s; the settings in force stay", self.path, exc
                )
                continue
            try:
                await self._on_text(text)
            except Exception:  # a failed reload must never stop the watcher, or the daemon
                log.exception("applying %s failed; the settings in force stay", self.path)


@dataclass
class _Slot:
    completer: Completer
    manager: Any
    running: int = 0
    retired: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)


CompleterFactory = Callable[[Settings, EventBus], Any]


class SwappableCompleter:
    """A :class:`Completer` whose engine can be replaced while requests run."""

    def __init__(self, factory: CompleterFactory, bus: EventBus) -> None:
        self._factory = factory
        self._bus = bus
        self._current: _Slot | None = None
        self._owners: dict[str, _Slot] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._starting: asyncio.Task[None] | None = None

    async def start(self, settings: Settings) -> None:
        self._current = await self._enter(settings)

    def start_soon(
        self, settings: Settings, prepare: Callable[[], None] | None = None
    ) -> asyncio.Task[None]:
        """Build the engine in the background, so the hotkeys go live without waiting for
        the HTTP stack and the keyring; a request that comes first waits for it.

        ``prepare`` runs in a thread first (imports, the keyring's backend), keeping the
        loop free for the first press's capture while it runs.
        """

        async def build() -> None:
            if prepare is not None:
                await asyncio.to_thread(prepare)
            await self.start(settings)

        self._starting = asyncio.create_task(build(), name="anyfill-build-backends")
        return self._starting

    async def _started(self) -> None:
        """Wait for a background start; its failure is raised to whoever needs the engine."""
        starting = self._starting
        if starting is not None and self._current is None:
            # Shielded: a cancelled request must not cancel the build for the next one.
            await asyncio.shield(starting)

    async def _enter(self, settings: Settings) -> _Slot:
        manager = self._factory(settings, self._bus)
        entered = await manager.__aenter__()
        return _Slot(entered if entered is not None else manager, manager)

    async def replace(self, settings: Settings) -> None:
        """Build the new engine first (a failure leaves the old one serving), then swap."""
        await self._started()
        new = await self._enter(settings)
        old, self._current = self._current, new
        if old is not None:
            old.retired = True
            if old.running == 0:
                await self._close(old)

    @property
    def current(self) -> Completer | None:
        """The engine new requests go to."""
        return self._current.completer if self._current is not None else None

    @property
    def running(self) -> int:
        return len(self._owners)

    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: OnChunk | None = None,
    ) -> Completion:
        await self._started()
        slot = self._current
        if slot is None:
            raise RuntimeError("the completer is not started")
        slot.running += 1
        self._owners[request.id] = slot
        try:
            if on_chunk is None:  # a completer may take no chunks (the desktop's fakes)
                return await slot.completer.complete(request, on_text)
            return await slot.completer.complete(request, on_text, on_chunk=on_chunk)
        finally:
            self._owners.pop(request.id, None)
            slot.running -= 1
            if slot.retired and slot.running == 0:
                task = asyncio.create_task(self._close(slot), name="anyfill-retire-engine")
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def cancel(self, request_id: str) -> bool:
        slot = self._owners.get(request_id) or self._current
        return await slot.completer.cancel(request_id) if slot is not None else False

    async def _close(self, slot: _Slot) -> None:
        if slot.closed.is_set():
            return
        slot.closed.set()
        try:
            await slot.manager.__aexit__(None, None, None)
        except Exception:  # closing sockets of a retired engine must not disturb the new one
            log.exception("closing the previous backends failed")
        log.debug("the previous backends are closed")

    async def aclose(self) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._starting  # closed below if it got as far as an engine
        if self._current is not None:
            await self._close(self._current)
            self._current = None
        for slot in {id(s): s for s in self._owners.values()}.values():
            await self._close(slot)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def __aenter__(self) -> SwappableCompleter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


Applier = Callable[[Settings, Settings], Awaitable[list[str]]]
"""Puts new settings in force (old, new); returns what could not be applied as written."""


class Reloader:
    """Validates each new version of the file and hands the good ones to ``apply``."""

    def __init__(
        self,
        path: Path,
        current: Settings,
        apply: Applier,
        bus: EventBus,
        *,
        environ: Mapping[str, str] | None = None,
        check: Callable[[Settings], None] | None = None,
    ) -> None:
        self.path = path
        self.current = current
        self._apply = apply
        self._bus = bus
        self._environ = os.environ if environ is None else environ
        self._check = check
        self.rejected: tuple[str, ...] = ()

    async def on_text(self, text: str) -> None:
        path = str(self.path)
        try:
            new = parse_settings(text, path=path, environ=self._environ)
            if self._check is not None:
                self._check(new)
        except InvalidConfig as exc:
            self._reject(tuple(problem.render(path) for problem in exc.problems))
            return
        except ConfigError as exc:
            self._reject((f"{path}: {exc}",))
            return
        if self.rejected:
            log.info("%s is valid again", path)
            self.rejected = ()
        old = self.current
        changed = tuple(
            name for name in Settings.model_fields if getattr(new, name) != getattr(old, name)
        )
        if not changed:
            return
        notes = await self._apply(old, new)
        self.current = new
        log.info("settings reloaded from %s: %s changed", path, ", ".join(changed))
        for note in notes:
            if "taken by another program" in note:
                self._bus.publish(Problem("hotkey_taken", note, "choose another combination"))
            else:
                self._bus.publish(Problem("restart_needed", note, "restart anyfill"))
        self._bus.publish(SettingsApplied(path, changed, tuple(notes)))

    def _reject(self, problems: tuple[str, ...]) -> None:
        if problems == self.rejected:
            return
        self.rejected = problems
        log.error(
            "the configuration file is invalid; the last good settings stay in force:\n  %s",
            "\n  ".join(problems),
        )
        self._bus.publish(SettingsRejected(str(self.path), problems))
        self._bus.publish(
            Problem(
                "config_invalid",
                problems[0] if len(problems) == 1 else f"{problems[0]} (+{len(problems) - 1} more)",
                "fix the file (anyfill config validate); the last good settings stay in force",
            )
        )

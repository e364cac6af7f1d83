"""Settings that take effect while anyfill runs: the config file is watched and re-applied.

- :class:`ConfigWatcher` notices a new version of the file (the panel's atomic rename and a
  text editor's save alike) by polling its identity; a stat every few hundred milliseconds
  costs nothing and needs no platform notification API. A file renamed into place (a new
  inode) is read at once; one written in place only once it held still for ``settle_s`` (a
  save that truncates and then writes is one change, not an empty file and then a cut one),
  and it is read and parsed off the event loop within the CLI's
  bounds (:func:`~anyfill.config.store.read_config_text`: a regular file of at most 1 MiB), so
  a FIFO, ``/dev/zero`` or a 100 MB file costs an error line, never the hotkeys or SIGTERM.
- The engine changes through :class:`~anyfill.daemon.engine.swappable.SwappableCompleter`.
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
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from anyfill.config.model import Settings
from anyfill.config.store import InvalidConfig, parse_settings, read_config_text
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import Problem
from anyfill.daemon.errors import AnyfillError, ConfigError, HotkeyTaken
from anyfill.daemon.log import redact
from anyfill.daemon.settings.live import SECTIONS, changed_sections

log = logging.getLogger("anyfill.reload")

#: How often the file's identity is checked.
POLL_S = 0.25
#: How long a new version must hold still before it is read: longer than the pause between
#: an in-place save's truncate and its write (an editor's is microseconds; a script's
#: ``: > file; ...; cat > file`` a fraction of a second), short enough to feel live.
SETTLE_S = 1.0


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
    """Calls ``on_text`` with the file's text each time a new version of it settled, and
    ``on_unreadable`` with the reason when a version cannot be read (removed, not a regular
    file, too big, not UTF-8)."""

    def __init__(
        self,
        path: Path,
        on_text: Callable[[str], Awaitable[None]],
        *,
        on_unreadable: Callable[[str], None] | None = None,
        poll_s: float = POLL_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        self.path = path
        self._on_text = on_text
        self._on_unreadable = on_unreadable
        self._poll_s = poll_s
        self._settle_s = settle_s
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

    async def _settled(self) -> FileId | None:
        """The file's identity once a change held still for ``settle_s``."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._poll_s)
            current = file_id(self.path)
            if current == self._seen:
                continue
            # A new inode is a file renamed into place (the panel, most editors): complete
            # when it appears. The same inode written again may be half-written yet.
            renamed = current is not None and (self._seen is None or current[0] != self._seen[0])
            settle = self._poll_s if renamed else self._settle_s
            since = loop.time()
            while loop.time() - since < settle:
                await asyncio.sleep(self._poll_s)
                later = file_id(self.path)
                if later != current:  # still being written: wait from this step on
                    current, since = later, loop.time()
            self._seen = current
            return current

    async def _watch(self) -> None:
        while True:
            current = await self._settled()
            if current is None:
                self._unreadable("the file was removed")
                continue
            try:
                # A thread, so neither the read nor a slow disk holds the loop; the bounds
                # are the CLI's, so the thread ends soon whatever sits at the path.
                text = await asyncio.to_thread(read_config_text, self.path)
            except ConfigError as exc:
                self._unreadable(exc.reason)
                continue
            try:
                await self._on_text(text)
            except Exception:  # a failed reload must never stop the watcher, or the daemon
                log.exception("applying %s failed; the settings in force stay", self.path)

    def _unreadable(self, reason: str) -> None:
        log.warning("%s: %s; the settings in force stay", self.path, reason)
        if self._on_unreadable is not None:
            self._on_unreadable(reason)


Applier = Callable[[Settings, Settings], Awaitable[list[AnyfillError]]]
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
            # Off the loop: parsing costs about 0.75 s per MB, and a file may hold 1 MiB.
            new = await asyncio.to_thread(parse_settings, text, path=path, environ=self._environ)
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
        differ = changed_sections(old, new)
        changed = tuple(name for name in SECTIONS if name in differ)
        if not changed:
            return
        notes = await self._apply(old, new)
        self.current = new
        log.info("settings reloaded from %s: %s changed", path, ", ".join(changed))
        for note in notes:
            if isinstance(note, HotkeyTaken):
                self._bus.publish(Problem("hotkey_taken", str(note), "choose another combination"))
            else:
                self._bus.publish(Problem("restart_needed", str(note), "restart anyfill"))
        self._bus.publish(SettingsApplied(path, changed, tuple(map(str, notes))))

    def on_unreadable(self, reason: str) -> None:
        """The file on disk cannot be read: the last good settings stay, and ``status``
        and the tray say so instead of "in force"."""
        self._reject((f"{self.path}: cannot read the file: {reason}",))

    def _reject(self, problems: tuple[str, ...]) -> None:
        # A key pasted into a wrong-typed field is echoed by the validator ("found '...'"):
        # status and the tray show what the log shows, redacted.
        problems = tuple(redact(problem) for problem in problems)
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

"""The command registry behind the control socket.

The daemon registers the built-in commands (:mod:`.builtins`); another layer adds its own
without this package knowing it, e.g. the tray::

    commands.register("show-settings", open_settings, summary="open the settings window")
    commands.ui = "tray"

A handler takes the request's ``args`` (a dict, maybe empty) and returns a JSON-able dict
(or ``None`` for ``{}``), directly or as an awaitable. It runs on the daemon's asyncio loop:
a Qt layer hands the work to its own thread (``ui/bridge.py``) and returns. It raises
:class:`CommandError` for an answer with an error code and message; any other exception
is logged and answered as an internal error, and the daemon keeps serving.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from anyfill.daemon.control import protocol

log = logging.getLogger("anyfill.control")

Result = dict[str, Any] | None
Handler = Callable[[dict[str, Any]], Result | Awaitable[Result]]
StatusSection = Callable[[], Any]
"""Returns a JSON-able value that ``status`` shows under the section's name."""

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class CommandError(Exception):
    """An error answer: ``code`` for programs (see :mod:`.protocol`), ``message`` for people."""

    def __init__(self, message: str, code: str = protocol.FAILED) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Command:
    name: str
    handler: Handler
    summary: str


class Commands:
    """Name -> handler, plus what ``ping`` and ``status`` report about the attached layers."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}
        self._status_sections: dict[str, StatusSection] = {}
        self.ui: str | None = None
        """The attached user interface (``"tray"``), ``None`` when headless; ``ping`` says it."""

    def register(
        self, name: str, handler: Handler, *, summary: str = "", replace: bool = False
    ) -> None:
        """Add a command; names are lower-case words joined by ``-``."""
        if not _NAME.match(name):
            raise ValueError(f"invalid command name {name!r} (lower-case letters, digits, '-')")
        if name in self._commands and not replace:
            raise ValueError(f"the control command {name!r} is already registered")
        self._commands[name] = Command(name, handler, summary)

    def unregister(self, name: str) -> None:
        self._commands.pop(name, None)

    def add_status_section(self, name: str, section: StatusSection) -> None:
        """Show ``section()`` under ``name`` in every ``status`` answer (e.g. the tray's state)."""
        self._status_sections[name] = section

    def remove_status_section(self, name: str) -> None:
        self._status_sections.pop(name, None)

    def summaries(self) -> dict[str, str]:
        return {name: command.summary for name, command in sorted(self._commands.items())}

    def status_sections(self) -> dict[str, Any]:
        sections: dict[str, Any] = {}
        for name, section in self._status_sections.items():
            try:
                sections[name] = section()
            except Exception as exc:  # one broken section must not hide the rest
                log.exception("status section %r failed", name)
                sections[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return sections

    async def dispatch(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        command = self._commands.get(name)
        if command is None:
            known = ", ".join(sorted(self._commands)) or "none"
            raise CommandError(
                f"unknown command {name!r} (known: {known})", protocol.UNKNOWN_COMMAND
            )
        outcome = command.handler(args)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome is None:
            return {}
        if not isinstance(outcome, Mapping):
            raise TypeError(f"control command {name!r} returned {type(outcome).__name__}")
        return dict(outcome)


def require_choice(args: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> str:
    """``args[key]``, which must be one of ``choices``; else a ``bad-args`` error."""
    value = args.get(key)
    if value not in choices:
        raise CommandError(
            f"'{key}' must be one of {', '.join(choices)} (got {value!r})", protocol.BAD_ARGS
        )
    return str(value)


def optional_bool(args: Mapping[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise CommandError(f"'{key}' must be true or false (got {value!r})", protocol.BAD_ARGS)
    return value

"""Puts a completion into the target: per-app method, focus guard, clipboard kept."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

from anyfill.config.model import InsertConfig
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.timings import AppTimings
from anyfill.daemon.desktop.inject.focus import ensure_focus, ensure_no_new_selection
from anyfill.daemon.desktop.inject.paste import paste
from anyfill.daemon.desktop.inject.policy import choose
from anyfill.daemon.desktop.ports import Desktop, Target
from anyfill.daemon.settings.live import Reader, reader

log = logging.getLogger("anyfill.inject")


@dataclass(frozen=True)
class Inserted:
    method: str
    """``paste``, ``type``, or the direct route's name."""
    doubt: str = ""
    """Why the text may not have landed as sent ('' when nothing points to it)."""
    verified: bool = False
    """The route itself read the text back (the direct route does)."""


class Inserter:
    @property
    def _config(self) -> InsertConfig:
        # Read at each use: the settings in force, while what was learned here stays.
        return self._read_config()

    def __init__(self, desktop: Desktop, config: InsertConfig | Reader[InsertConfig]) -> None:
        self._desktop = desktop
        self._read_config = reader(config)
        self.timings = AppTimings()
        """How each app reads a paste, learned from the pastes so far."""

    async def insert(
        self, text: str, target: Target, app: AppSettings, *, selection_was_theirs: bool
    ) -> Inserted:
        """Insert ``text`` at the caret of ``target``: the method used (the direct route
        first, where the desktop has one); FocusChanged if the target lost the focus.

        ``selection_was_theirs``: the target owned PRIMARY right after capture (then a
        new selection cannot be told apart, and the selection guard is off).
        """
        focus = partial(ensure_focus, self._desktop.windows, target.window_id)
        clipboard = self._desktop.clipboard

        def new_selection(window_id: int) -> bool:
            return clipboard.owned_by_program_of("primary", window_id)

        def guard() -> None:
            focus()
            if not selection_was_theirs:
                ensure_no_new_selection(self._desktop.clipboard, target.window_id)

        guard()
        direct = self._desktop.direct
        # An app rule asking for typed keys is taken at its word.
        if direct is not None and app.mode != "type" and await direct.insert(text, target, focus):
            return Inserted(direct.name, verified=True)
        method, why = choose(app.mode, text, self._config.type_max_chars)
        if method == "type":
            if await self._desktop.keys.type_text(text):
                return Inserted(method)
            method, why = "paste", "the keyboard layout lacks a key for some characters"
        if why:
            log.info("%s: %s", method, why)
        pasted = await paste(
            self._desktop,
            text,
            app.paste_keys,
            restore=self._config.restore_clipboard,
            restore_timeout_s=self._config.restore_timeout_ms / 1000,
            guard=guard,
            reader=target.window_id,
            app=target.app,
            timings=self.timings,
            veto=None if selection_was_theirs else partial(new_selection, target.window_id),
            relayed=target.relays_input,
        )
        doubt = ""
        if pasted.late_read:
            doubt = (
                "the application read the clipboard again after anyfill restored yours: "
                "it may have pasted your clipboard instead of the completion"
            )
        return Inserted(method, doubt)

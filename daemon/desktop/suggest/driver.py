"""The suggester: the AT-SPI events of the focused field drive the trigger; when it asks,
the field is read, the rules are checked and the pipeline shows the suggestion.

Runs only while ``suggestions.auto`` is on (or a rule turns suggestions on for an app),
anyfill is not paused and a preview window exists; the listener is closed otherwise,
so applications stop sending the events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from anyfill.config.model import Settings, is_local_backend
from anyfill.daemon.completion import Completer, Completion, CompletionRequest, Plan
from anyfill.daemon.desktop import apprules
from anyfill.daemon.desktop.capture.base import trimmed
from anyfill.daemon.desktop.pipeline import Outcome, Pipeline, Suggestion
from anyfill.daemon.desktop.ports import Desktop, Target
from anyfill.daemon.desktop.preview import Look
from anyfill.daemon.desktop.suggest.listener import AtspiTextSource, FieldRead, TextEvent
from anyfill.daemon.desktop.suggest.pause import AdaptivePause
from anyfill.daemon.desktop.suggest.rules import refusal
from anyfill.daemon.desktop.suggest.trigger import SuggestTrigger
from anyfill.daemon.desktop.suggest.typethrough import Shown
from anyfill.daemon.scheduler.clock import Clock, RealClock
from anyfill.daemon.settings.live import Reader

log = logging.getLogger("anyfill.suggest")

WATCH_S = 0.5
"""How often the suggester looks whether it should be listening (settings, pause)."""
RETRY_S = 10.0
"""After the accessibility bus refused the listener, try again this much later."""
TYPED_THROUGH = "typed through"


class Suggester:
    def __init__(
        self,
        settings: Reader[Settings],
        pipeline: Pipeline,
        desktop: Desktop,
        completer: Completer,
        *,
        clock: Clock | None = None,
        address: str | None = None,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self._settings = settings
        self._pipeline = pipeline
        self._desktop = desktop
        self._completer = completer
        self._clock = clock or RealClock()
        self._address = address
        self._source: AtspiTextSource | None = None
        self._field: tuple[str, str] | None = None
        self._target: Target | None = None
        self._app: apprules.AppSettings | None = None
        self._reading: asyncio.Task[None] | None = None
        self._paused = paused
        """The tray's one-click pause of suggestions as you type (the hotkeys go on)."""
        self.listening = False
        self._ignored = 0
        self._asks = 0
        self.trigger = SuggestTrigger(
            self._clock,
            AdaptivePause(settings().suggestions.pause_ms),
            ask=self._ask,
            cancel=self._cancel,
            local=self._chain_is_local,
        )

    @property
    def wanted(self) -> bool:
        settings = self._settings()
        wanted = settings.suggestions.auto or any(r.suggest for r in settings.insert.apps)
        return wanted and not self._paused() and not self._pipeline.paused

    async def run(self) -> None:
        """Listen while suggestions are wanted, until cancelled."""
        if not self._pipeline.previews:
            return
        while True:
            if not self.wanted:
                await asyncio.sleep(WATCH_S)
                continue
            try:
                async with AtspiTextSource(self._on_event, self._address) as source:
                    self._source, self.listening = source, True
                    log.info(
                        "suggestions as you type: listening to the focused application's "
                        "text events (some Qt applications switch to screen-reader mode)"
                    )
                    while self.wanted:
                        self.trigger.pause.fixed_ms = self._settings().suggestions.pause_ms
                        await asyncio.sleep(WATCH_S)
            except (OSError, TimeoutError, RuntimeError, ValueError) as exc:
                log.warning("suggestions as you type need the accessibility bus: %s", exc)
                await asyncio.sleep(RETRY_S)
            finally:
                if self.listening:
                    log.info("suggestions as you type: stopped listening")
                self._source, self.listening = None, False
                self._forget()

    # -- events ---------------------------------------------------------------------

    def _on_event(self, event: TextEvent) -> None:
        if self._desktop.keys.injecting:
            return  # our own insertion
        target = self._desktop.windows.focused()
        if target is None or target.pid != event.pid:
            if event.pid != self._ignored:
                self._ignored = event.pid
                log.debug("text events of pid %d: not the focused application", event.pid)
            return
        where = (event.sender, event.path)
        if self._field != where or self._target is None or not _same_window(self._target, target):
            self._forget()
            app = self._app_settings(target)
            if app is None:
                return
            self._field, self._target, self._app = where, target, app
        elif target != self._target:
            # The same field under a new title (an editor marks its document modified at the
            # first key after a save): the rules are matched again, since a rule may match
            # titles, but the user's rhythm and the suggestion on screen stay (type-through).
            app = self._app_settings(target)
            if app is None:
                self._forget()
                return
            self._target, self._app = target, app
        if event.kind == "insert":
            rest = self.trigger.inserted(event.offset, event.text)
            if rest is not None:
                self._start_reading(self._show_rest(rest))
        elif event.kind == "delete":
            self.trigger.deleted(event.offset)
        else:
            self.trigger.caret_moved(event.offset)

    def _app_settings(self, target: Target) -> apprules.AppSettings | None:
        settings = self._settings()
        app = apprules.resolve(target, settings.insert, settings.capture.strategies)
        on = app.suggest if app.suggest is not None else settings.suggestions.auto
        if app.disabled or not on:
            log.debug("no suggestions in %s (rule %r)", target.app, app.rule)
            return None
        return app

    def _forget(self) -> None:
        self.trigger.left()
        self._field = self._target = self._app = None

    # -- asking ---------------------------------------------------------------------

    def _ask(self) -> None:
        self._start_reading(self._ask_now())

    def _cancel(self) -> None:
        if self._reading is not None and not self._reading.done():
            self._reading.cancel()
        self._pipeline.cancel_suggestion()

    def _start_reading(self, work: Any) -> None:
        if self._reading is not None and not self._reading.done():
            self._reading.cancel()
        self._reading = asyncio.get_running_loop().create_task(work, name="anyfill-suggest-read")

    async def _read(self) -> tuple[FieldRead, Target, apprules.AppSettings] | None:
        source, where, target, app = self._source, self._field, self._target, self._app
        if source is None or where is None or target is None or app is None:
            return None
        read = await source.read(*where)
        if read is None:
            return None
        reason = refusal(read.field, self._settings().suggestions.max_chars_after_caret)
        if reason:
            log.debug("no suggestion: %s", reason)
            return None
        return read, target, app

    async def _ask_now(self) -> None:
        fired = self.trigger.asked_at or time.monotonic()  # the end of the user's pause
        found = await self._read()
        if found is None:
            self.trigger.finished()
            return
        read, target, app = found
        chain = self._settings().suggestion_chain(app.backends)
        if not chain:
            log.info("no suggestion: no local backend (suggestions.cloud_auto is off)")
            self.trigger.finished()
            return

        self._asks += 1
        this = self._asks

        def answered(completion: Completion | None, ms: float) -> None:
            if this != self._asks:
                # Superseded by a newer ask: its answer must neither end the newer one's
                # flight (a key would then not cancel it) nor move the type-through cache.
                return
            self.trigger.finished(ms if completion is not None else None)
            if completion is not None:
                self.trigger.shown(read.caret_offset, completion.middle)
                # bench/bench_suggestions.py: the pause's end and the backend's share
                log.debug("suggestion asked at %.6f, backend %.3f ms", fired, ms)

        self._show(read, target, app, chain, _Timed(self._completer, answered))

    async def _show_rest(self, rest: Shown) -> None:
        found = await self._read()
        if found is None or found[0].caret_offset != rest.offset:
            self.trigger.typethrough.clear()
            return
        read, target, app = found
        log.debug("typed through: %d characters of the suggestion left", len(rest.middle))
        self._show(read, target, app, (), _Fixed(rest.middle))

    def _show(
        self,
        read: FieldRead,
        target: Target,
        app: apprules.AppSettings,
        chain: tuple[str, ...],
        completer: Completer,
    ) -> None:
        settings = self._settings()
        captured = trimmed(
            read.field.before,
            read.field.after,
            target,
            "accessibility",
            settings.capture,
            caret=read.caret,
        )
        look = Look(auto=True, font_family=read.font_family, font_size=read.font_size)
        task = self._pipeline.suggest(
            Suggestion(captured, target, app, chain, completer, look, _ReadBack(self))
        )
        if task is not None:
            task.add_done_callback(self._closed)

    def _closed(self, task: asyncio.Task[Outcome]) -> None:
        """Esc: the user refused this suggestion, so typing its first letters must not
        bring it back (type-through is for a suggestion still wanted)."""
        if task.cancelled() or task.exception() is not None:
            return
        if task.result().reason == "dismissed":
            self.trigger.typethrough.clear()

    async def read_before_caret(self) -> str | None:
        """The text before the caret of the field suggestions are shown for, read now."""
        source, where = self._source, self._field
        if source is None or where is None:
            return None
        read = await source.read(*where)
        return read.field.before if read is not None else None

    def _chain_is_local(self) -> bool:
        """Every backend suggestions may ask is on this machine (a shorter pause)."""
        settings = self._settings()
        app = self._app.backends if self._app is not None else ()
        names = settings.suggestion_chain(app)
        return all(is_local_backend(settings.backend(name)) for name in names)


def _same_window(one: Target, other: Target) -> bool:
    """The same window of the same program; its title may have changed."""
    return replace(one, title="") == replace(other, title="")


class _ReadBack:
    """The pipeline's check of an accepted suggestion, read over the suggester's bus."""

    def __init__(self, suggester: Suggester) -> None:
        self._suggester = suggester

    async def read_back(self, target: Target, app: apprules.AppSettings) -> str | None:
        return await self._suggester.read_before_caret()


class _Timed:
    """The engine, telling the suggester when (and whether) it answered."""

    def __init__(
        self, inner: Completer, answered: Callable[[Completion | None, float], None]
    ) -> None:
        self._inner = inner
        self._answered = answered

    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: Any = None,
    ) -> Completion:
        completion: Completion | None = None
        started = time.monotonic()
        try:
            if on_chunk is None:
                completion = await self._inner.complete(request, on_text)
            else:
                completion = await self._inner.complete(request, on_text, on_chunk=on_chunk)
            return completion
        finally:
            self._answered(completion, (time.monotonic() - started) * 1000)

    async def cancel(self, request_id: str) -> bool:
        return await self._inner.cancel(request_id)


class _Fixed:
    """Type-through: the rest of the suggestion on screen, no backend asked."""

    def __init__(self, middle: str) -> None:
        self._middle = middle

    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: Any = None,
    ) -> Completion:
        return Completion(
            request.id, self._middle, self._middle, TYPED_THROUGH, Plan("native"), 0.0
        )

    async def cancel(self, request_id: str) -> bool:
        return False

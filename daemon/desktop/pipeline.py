"""One hotkey press end to end: wait for the keys, capture, complete, guard focus, insert.

A newer press supersedes the running one (its request is cancelled); the cancel hotkey
stops it. Capture and insertion are never interrupted half-way: they send keys and own
the clipboard, so a cancel waits for them to finish (they take tens of milliseconds)
and takes effect right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from anyfill.config.model import CaptureStrategy, Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import PressFinished, PressStarted, PressStatus
from anyfill.daemon.completion import Completer, Completion, CompletionRequest
from anyfill.daemon.desktop import apprules
from anyfill.daemon.desktop.capture.base import (
    Captured,
    ReadBack,
    ReadBackAround,
    Strategy,
    capture,
)
from anyfill.daemon.desktop.context_sources import (
    PASSWORD_HINT,
    ContextMemory,
    resolve_sources,
    with_context,
)
from anyfill.daemon.desktop.hotkeys import Action
from anyfill.daemon.desktop.inject.focus import ensure_focus
from anyfill.daemon.desktop.inject.inserter import Inserter
from anyfill.daemon.desktop.inject.paste import CATCH_UP_S
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Target
from anyfill.daemon.desktop.preview import Look, PreviewController
from anyfill.daemon.errors import (
    AnyfillError,
    FocusChanged,
    SecureField,
    SelectionAppeared,
    error_text,
)
from anyfill.daemon.log import Private
from anyfill.daemon.settings.live import Reader, reader
from anyfill.daemon.waiting import Interrupted, Interruptions, run_interruptibly

log = logging.getLogger("anyfill.pipeline")

T = TypeVar("T")
Status = PressStatus
VERIFY_CHARS = 200
"""The read-back must end with this much of the captured prefix plus the completion."""
UNCHANGED = "the completion did not land: the text before the caret is unchanged"
AFTER_CHANGED = "the text after the caret is not what it was: check the document"
LATE_DURING_PASTE = (
    "the application answered anyfill's select keys only after the paste keys had gone:"
    " the context was incomplete, check the document"
)
INSERT_RETRIES = 1
"""A paste the read-back shows dropped, with the text unchanged, is sent once more."""
TYPED_SETTLE_S = 2.0
"""How long the read-back waits for an app to take keys already typed into it: the
compositor or X server has them, the app reads them from its queue when it gets to it
(a CI run on sway judged six typed characters in Mousepad a wrong insertion: the
read-back matched neither the whole insertion nor the text before it)."""
TYPED_POLL_S = 0.04


Outcome = PressFinished
"""What became of one press (the bus event itself: nothing is copied)."""


@dataclass(frozen=True)
class Suggestion:
    """A suggestion as you type, ready to show: what the suggester read and decided."""

    captured: Captured
    target: Target
    app: apprules.AppSettings
    chain: tuple[str, ...]
    completer: Completer
    """The engine, wrapped to time it (or a fixed answer: type-through)."""
    look: Look
    read_back: ReadBack | None = None
    """Reads the field again the way the suggester read it, to check the insertion."""


class Pipeline:
    def __init__(
        self,
        desktop: Desktop,
        completer: Completer,
        settings: Settings | Reader[Settings],
        strategies: Mapping[CaptureStrategy, Strategy],
        *,
        bus: EventBus | None = None,
        preview: PreviewController | None = None,
    ) -> None:
        self._desktop = desktop
        self._bus = bus
        self._preview = preview
        """Shows the completion before it goes in; None (headless): insert directly."""
        self._presses = 0
        self._completer = completer
        self._read_settings = reader(settings)
        # Built once, reading the settings in force at each press: a reload keeps the
        # capture timings and paste read counts they learned.
        self._strategies = strategies
        self._inserter = Inserter(desktop, lambda: self._settings.insert)
        self.context_memory = ContextMemory(lambda: self._settings.context)
        """Accepted completions and clipboard texts, the context sources that outlive a
        press (in memory only)."""
        self._current: asyncio.Task[Outcome] | None = None
        self._suggestion: asyncio.Task[Outcome] | None = None
        """The current task when it is a suggestion as you type (typing cancels only it)."""
        self._request_id: str | None = None
        self.history: deque[Outcome] = deque(maxlen=self._history_size())
        self.paused = False
        """While paused, presses are ignored (cancel still works); the tray and the control
        socket's ``pause``/``resume`` set it."""

    @property
    def current(self) -> asyncio.Task[Outcome] | None:
        """The latest press's task (done or not), ``None`` before the first press."""
        return self._current

    @property
    def busy(self) -> bool:
        return self._current is not None and not self._current.done()

    @property
    def settings(self) -> Settings:
        return self._read_settings()

    _settings = settings

    def _history_size(self) -> int:
        return max(self._settings.ui.history_size, 1)

    def trigger(self, action: Action) -> None:
        """Called on the loop thread for each hotkey press."""
        log.debug("hotkey: %s", action)
        if action == "cancel":
            self.cancel()
            return
        if self.paused:
            log.info("paused: the %s hotkey is ignored until anyfill is resumed", action)
            return
        if self._preview is not None and self._preview.trigger_accepts:
            # The popup has no key to insert with (Wayland without compositor IPC).
            self._preview.command("accept")
            return
        previous = self._current
        if previous is not None and not previous.done():
            log.info("a newer hotkey press supersedes the running completion")
            self.cancel()
        self._presses += 1
        self._current = asyncio.get_running_loop().create_task(
            self._run(action, previous, time.monotonic(), self._presses), name=f"anyfill-{action}"
        )
        if self._bus is not None:
            self._bus.publish(PressStarted(self._presses, action))

    def cancel(self) -> None:
        task = self._current
        if task is not None and not task.done() and not task.cancelling():
            task.cancel()
            if self._request_id is not None:
                asyncio.get_running_loop().create_task(self._completer.cancel(self._request_id))

    # -- suggestions as you type ------------------------------------------------------

    @property
    def previews(self) -> bool:
        """A preview window can show suggestions (the tray runs)."""
        return self._preview is not None

    def suggest(self, suggestion: Suggestion) -> asyncio.Task[Outcome] | None:
        """Show a suggestion the user did not ask for with a key (the suggester read the
        field over AT-SPI). It supersedes an earlier suggestion through the same
        latest-wins path as a press, but never a running hotkey press (None then)."""
        if self.paused or self._preview is None:
            return None
        previous = self._current
        if previous is not None and not previous.done():
            if previous is not self._suggestion:
                return None
            self.cancel()
        self._presses += 1
        task = asyncio.get_running_loop().create_task(
            self._run_suggestion(previous, suggestion), name="anyfill-suggest"
        )
        self._current = self._suggestion = task
        return task

    def cancel_suggestion(self) -> bool:
        """The user typed on: cancel the suggestion in flight (a hotkey press goes on)."""
        task = self._suggestion
        if task is not None and task is self._current and not task.done():
            self.cancel()
            return True
        return False

    async def _run_suggestion(
        self, previous: asyncio.Task[Outcome] | None, suggestion: Suggestion
    ) -> Outcome:
        captured, target = suggestion.captured, suggestion.target
        if previous is not None:
            await asyncio.wait([previous])
        started = time.monotonic()
        assert self._preview is not None
        request = CompletionRequest(context=captured.context, backends=suggestion.chain)
        self._request_id = request.id
        try:
            shown = await self._preview.run(request, target, suggestion.completer, suggestion.look)
        finally:
            self._request_id = None
        if shown is None:
            # Not kept in the history: suggestions the user typed past are no event.
            reason = self._preview.last_reason
            log.debug("suggestion closed: %s", reason)
            return Outcome("suggest", "dismissed", reason, target.app)
        # Accepted: from here on it is the user's own insertion, which the text events it
        # causes (or typing meanwhile) must not cancel or supersede.
        if self._suggestion is asyncio.current_task():
            self._suggestion = None
        try:
            outcome = await self._deliver(
                "suggest",
                started=started,
                target=target,
                app=suggestion.app,
                captured=captured,
                theirs=False,
                completion=shown,
                inserter=self._inserter,
                strategies=(
                    {"accessibility": suggestion.read_back}
                    if suggestion.read_back is not None
                    else self._strategies
                ),
                verify=self._settings.insert.verify,
            )
        except Exception as exc:  # a bug or a broken connection: log it, keep serving
            log.exception("inserting the suggestion failed unexpectedly")
            outcome = Outcome("suggest", "failed", f"internal error: {exc}", ms=_ms(started))
        outcome = replace(outcome, capture=captured.context.method, backend=shown.backend)
        self._record(outcome, self._presses)
        return outcome

    async def aclose(self) -> None:
        self.cancel()
        if self._current is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._current

    async def _run(
        self, action: Action, previous: asyncio.Task[Outcome] | None, started: float, press: int
    ) -> Outcome:
        if previous is not None:
            # Let the superseded press finish any capture or insertion it is inside.
            await asyncio.wait([previous])
        try:
            outcome = await self._press(action, started)
        except asyncio.CancelledError:
            self._record(Outcome(action, "cancelled", "cancelled", ms=_ms(started)), press)
            raise
        except Exception as exc:  # a bug or a broken connection: log it, keep serving
            log.exception("the completion failed unexpectedly")
            outcome = Outcome(action, "failed", f"internal error: {exc}", ms=_ms(started))
        self._record(outcome, press)
        return outcome

    def _record(self, outcome: Outcome, press: int = 0) -> None:
        if self.history.maxlen != self._history_size():  # ui.history_size changed
            self.history = deque(self.history, maxlen=self._history_size())
        self.history.append(outcome)
        if self._bus is not None:
            self._bus.publish(replace(outcome, press_id=press))
        # dismissed: the user's own choice
        fine = outcome.status in ("inserted", "sent", "clipboard", "dismissed")
        level = logging.INFO if fine else logging.WARNING
        log.log(
            level,
            "outcome=%s app=%s method=%s capture=%s ms=%.1f chars=%d%s",
            outcome.status,
            outcome.app or "-",
            outcome.method or "-",
            outcome.capture or "-",
            outcome.ms,
            len(outcome.middle or ""),
            f" reason={outcome.reason}" if outcome.reason else "",
        )

    async def _press(self, action: Action, started: float) -> Outcome:
        # One press runs on the settings it started with; a reload applies from the next.
        desktop, settings = self._desktop, self._settings
        strategies, inserter = self._strategies, self._inserter
        timeout = settings.hotkeys.modifier_release_timeout_ms / 1000
        if not await desktop.keys.wait_released(timeout):
            return Outcome(action, "failed", "keys were still held; release them and try again")
        target = desktop.windows.focused()
        if target is None:
            return Outcome(action, "failed", "no window has the keyboard focus")
        app = apprules.resolve(target, settings.insert, settings.capture.strategies)
        if app.disabled:
            return Outcome(
                action, "skipped", f"disabled for this app by rule {app.rule!r}", target.app
            )
        if desktop.windows.is_password_field(target):
            return Outcome(action, "skipped", "the caret is in a password field", target.app)
        sources = resolve_sources(target, settings)
        app = replace(app, read_fields=sources.fields)
        if sources.clipboard:
            await self._remember_clipboard()
        previewing = self._preview is not None and "preview" in (action, app.mode)
        if previewing:
            app = replace(app, mode="paste" if app.mode == "preview" else app.mode)
        elif action == "preview":
            log.info("no preview window in headless mode; inserting directly")
        captured: Captured | None = None
        try:
            try:
                # The app reports its focused field as it last handled the focus: let
                # it catch up first, or a window it has not yet seen focused is read
                # as another one (Mousepad's previous window) or as none.
                await desktop.windows.ping(target.window_id, CATCH_UP_S)
                captured = await _uninterrupted(capture(target, app, strategies))
                # Keyboard capture always hands PRIMARY back; other strategies leave it
                # alone, and a PRIMARY the app already owned cannot reveal a new selection.
                theirs = captured.context.method != "keyboard" and (
                    desktop.clipboard.owned_by_program_of("primary", target.window_id)
                )
                context = with_context(captured.context, target, sources, self.context_memory)
                request = CompletionRequest(context=context, backends=app.backends)
                self._request_id = request.id
                log.debug(
                    "request %s: prefix %s, suffix %s, context %d chunks %s",
                    request.id,
                    Private(captured.context.prefix),
                    Private(captured.context.suffix),
                    len(context.extra),
                    Private(repr(context.extra)),
                )
                if previewing and self._preview is not None:
                    shown = await self._preview.run(request, target, self._completer)
                    if shown is None:
                        reason = self._preview.last_reason
                        return Outcome(action, "dismissed", reason, target.app)
                    completion = shown
                else:
                    completion = await self._completer.complete(request)
            except SecureField as exc:
                return Outcome(action, "skipped", str(exc), target.app)
            except AnyfillError as exc:  # every backend's failure when all failed
                return Outcome(action, "failed", error_text(exc), target.app, ms=_ms(started))
            finally:
                self._request_id = None
            outcome = await self._deliver(
                action,
                started=started,
                target=target,
                app=app,
                captured=captured,
                theirs=theirs,
                completion=completion,
                inserter=inserter,
                strategies=strategies,
                verify=settings.insert.verify,
            )
            if sources.accepted and outcome.status == "inserted" and outcome.middle:
                self.context_memory.remember_accepted(
                    target, captured.context.prefix, outcome.middle
                )
            return replace(outcome, capture=captured.context.method, backend=completion.backend)
        finally:
            if captured is not None and captured.late is not None:
                await captured.late.close()

    async def _deliver(
        self,
        action: Action | Literal["suggest"],
        *,
        started: float,
        target: Target,
        app: apprules.AppSettings,
        captured: Captured,
        theirs: bool,
        completion: Completion,
        inserter: Inserter,
        strategies: Mapping[CaptureStrategy, Strategy | ReadBack],
        verify: bool,
    ) -> Outcome:
        middle = completion.middle
        if not middle:
            return Outcome(action, "empty", "the backend had nothing to add", target.app, "")
        late = captured.late
        if late is not None:
            # The app may still answer our capture keys: wait until it cannot any more.
            await _uninterrupted(late.settled())
            await _uninterrupted(late.check_now())
            if late.invalid:
                return Outcome(action, "failed", late.invalid, target.app, ms=_ms(started))
        if captured.context.method == "clipboard":
            await self._deliver_to_clipboard(captured, middle)
            return Outcome(action, "clipboard", "", target.app, middle, "clipboard", _ms(started))
        for attempt in range(1 + INSERT_RETRIES):
            try:
                inserted = await _uninterrupted(
                    inserter.insert(middle, target, app, selection_was_theirs=theirs)
                )
            except FocusChanged as exc:
                return Outcome(action, "kept", str(exc), target.app, middle, ms=_ms(started))
            except AnyfillError as exc:
                reason = str(exc)
                if late is not None:
                    await _uninterrupted(late.watch())
                    if late.invalid and isinstance(exc, SelectionAppeared):
                        # The refused selection was the capture's late answer: nothing went in.
                        reason = late.invalid
                    elif late.invalid:
                        # The paste keys reached an app still handling the capture keys
                        # (Qt pastes its own late copy): "nothing was inserted" is no fact.
                        reason = f"{exc}; {LATE_DURING_PASTE}"
                return Outcome(action, "failed", reason, target.app, middle, ms=_ms(started))
            if late is not None:
                # A stale claim caused by the capture keys may still come: restore again.
                await _uninterrupted(late.watch())
            status: Status
            if inserted.verified:
                status, reason = "inserted", ""
                break
            typed = inserted.method == "type"
            status, reason = await _uninterrupted(
                self._verify(
                    target,
                    app,
                    captured,
                    middle,
                    strategies=strategies,
                    verify=verify,
                    typed=typed,
                )
            )
            # Typed keys cannot be dropped the way a paste's clipboard read can: keys
            # that have not shown after the wait may still come, so never type twice.
            if status != "failed" or reason != UNCHANGED or typed or attempt == INSERT_RETRIES:
                break
            if inserted.doubt:
                # The app read the restored clipboard: the user's text may be in the
                # document where the read-back could not tell it apart.
                break
            # The read-back shows the document exactly as before (the app dropped the
            # paste, e.g. its clipboard read timed out under load): safe to insert again.
            log.info("the insertion did not land and nothing changed; inserting again")
        if inserted.doubt and status != "inserted":
            status, reason = "failed", inserted.doubt
        return Outcome(action, status, reason, target.app, middle, inserted.method, _ms(started))

    async def _verify(
        self,
        target: Target,
        app: apprules.AppSettings,
        captured: Captured,
        middle: str,
        *,
        strategies: Mapping[CaptureStrategy, Strategy | ReadBack],
        verify: bool,
        typed: bool = False,
    ) -> tuple[Status, str]:
        """``inserted`` when the text before the caret now ends with what we inserted (and,
        where the strategy reads both sides, the text after it is still what it was).

        ``typed``: the text went in as keys, which the app may still be reading: while the
        read-back shows only a first part of them, read again (up to TYPED_SETTLE_S)."""
        method = captured.context.method
        strategy: object = next((s for n, s in strategies.items() if n == method), None)
        if not verify or not isinstance(strategy, ReadBack):
            return "sent", "not checked (insert.verify is off or the capture cannot read back)"
        try:
            ensure_focus(self._desktop.windows, target.window_id)
        except FocusChanged:
            return "sent", "not checked: the focus moved right after the insertion"
        read_back = strategy
        wanted = (captured.whole_prefix + middle)[-VERIFY_CHARS:]

        async def read() -> tuple[str | None, str | None]:
            if isinstance(read_back, ReadBackAround):
                around = await read_back.read_back_around(target, app)
                return around if around is not None else (None, None)
            return await read_back.read_back(target, app), None

        now, after = await read()
        deadline = time.monotonic() + TYPED_SETTLE_S
        while (
            typed
            and now is not None
            and not now.endswith(wanted)
            and _partly_typed(now, captured.whole_prefix, middle)
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(TYPED_POLL_S)
            now, after = await read()
        if now is None:
            return "sent", "not checked: the text could not be read back"
        if now.endswith(wanted):
            if after is not None and not after.startswith(captured.whole_suffix[:VERIFY_CHARS]):
                return "failed", AFTER_CHANGED
            return "inserted", ""
        if _unchanged(now, captured.whole_prefix):
            return "failed", UNCHANGED
        return "failed", "the text before the caret is not what the insertion should have made"

    async def _remember_clipboard(self) -> None:
        """Keep the clipboard's text as context, unless a password manager marked it
        secret. (Between presses it is the user's: a paste restores it right after.)"""
        try:
            snapshot = await self._desktop.clipboard.snapshot("clipboard")
        except AnyfillError as exc:
            log.info("clipboard context not read: %s", exc)
            return
        if PASSWORD_HINT not in snapshot.items:
            self.context_memory.remember_clipboard(snapshot.text())

    async def _deliver_to_clipboard(self, captured: Captured, middle: str) -> None:
        """Clipboard mode: the completed text replaces what the user copied."""
        whole = captured.whole_prefix + middle + captured.whole_suffix
        await self._desktop.clipboard.offer(captured.source, ClipSnapshot.from_text(whole))


async def _uninterrupted(step: Coroutine[object, object, T]) -> T:
    """Run ``step`` to its end even if we are cancelled meanwhile, then honour the cancel.

    Its read-only parts (saving the user's clipboard, before anything was taken) end at
    once on the cancel: an owner dripping an incremental transfer must not hold the press.
    """
    scope = Interruptions()
    task = run_interruptibly(step, scope)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        scope.interrupt()
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, Interrupted):
            log.warning("a step finished with an error while cancelling: %s", error)
        raise


def _unchanged(now: str, prefix: str) -> bool:
    """Whether the text before the caret read back is still what the capture read. Every
    text ends with an empty prefix: there only an empty read-back is unchanged (a paste
    of the user's clipboard into an empty field read as "nothing changed", and the
    completion was pasted after it)."""
    if not prefix:
        return now == ""
    return now.endswith(prefix[-VERIFY_CHARS:])


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _partly_typed(now: str, prefix: str, middle: str) -> bool:
    """The text before the caret ends with the captured prefix and a first part (maybe
    none) of the typed middle: the app has not read all the keys yet."""
    return any(
        now.endswith((prefix + middle[:taken])[-VERIFY_CHARS:]) for taken in range(len(middle))
    )

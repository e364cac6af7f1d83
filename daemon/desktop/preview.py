"""Preview delivery: the completion streams into a popup, and the user decides.

The core keeps the decision (the popup is only a view): while a preview is open, the
popup keys (Tab/Enter accept, Esc dismiss, Alt+]/Alt+[ cycle; ``[ui]``) are grabbed on
the desktop and come back here; the preview closes by itself when the focused window
changes, when the user types or clicks anywhere. The keys are given back the moment it
closes. A key that accepts when there is nothing to accept yet is sent on to the
application, so the user loses no keystroke.

Alternatives: Alt+] asks the backends that have not answered in this preview yet (the
chain rotated by one, the ones that answered left out): the next backend's answer. When
none of them answers (the only one configured, or the others down), the backend that
answered first is asked for another sample (a seed of its own and a higher temperature,
past the cache), so the alternative is a real one; the popup says which it is. Alt+[
goes back. Each alternative is asked once and kept, so cycling back shows it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from anyfill.config.model import Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.bus.status import PreviewClosed, PreviewShown, PreviewText
from anyfill.daemon.completion import (
    Completer,
    Completion,
    CompletionRequest,
    OnChunk,
    new_request_id,
)
from anyfill.daemon.context import CaretRect, Context, ScreenArea
from anyfill.daemon.desktop.hotkeys import Hotkey, parse_hotkey
from anyfill.daemon.desktop.ports import Desktop, Target
from anyfill.daemon.errors import AnyfillError, RequestDropped
from anyfill.daemon.settings.live import Reader, reader

PreviewCommand = Literal["accept", "dismiss", "next", "previous"]
"""What the user (a popup key, the tray, ``anyfill preview``) may do to the visible preview."""
PREVIEW_COMMANDS: tuple[PreviewCommand, ...] = ("accept", "dismiss", "next", "previous")

log = logging.getLogger("anyfill.preview")

FOCUS_POLL_S = 0.05
TRIGGER_HINT = "preview shortcut again: insert   ·   cancel shortcut: dismiss"
LINE_CONTEXT_CHARS = 60
"""How much of the prefix's last line and the suffix's first line the popup shows."""
_CODE_HINTS = ("{", "}", "(", ")", ";", "=", "def ", "return", "import ", "    ", "\t", "#")


SUGGESTION_ACCEPT_KEYS = ("<tab>",)
"""A suggestion as you type is taken with Tab only; Enter goes on to the application."""


@dataclass(frozen=True)
class Look:
    """How a preview shows beyond the settings: a suggestion as you type, the app's font."""

    auto: bool = False
    font_family: str = ""
    font_size: float = 0.0


@dataclass
class _Alternative:
    request: CompletionRequest
    task: asyncio.Task[Completion] | None = None
    completion: Completion | None = None
    error: str = ""
    text: str = ""
    backend: str = ""
    first_text_ms: float | None = None
    then: CompletionRequest | None = None
    """Asked when ``request`` gets no answer: another sample from a backend that answered."""
    how: str = ""
    """What this alternative is, for the popup: "next backend" or "another sample"."""
    tried: tuple[str, ...] = ()
    """The backends asked for their usual answer (not asked for it again in this preview):
    the chain up to the one that answered, or all of it when none did."""


@dataclass
class _Session:
    preview_id: int
    context: Context
    target: Target
    chain: tuple[str, ...]
    completer: Completer
    alternatives: list[_Alternative] = field(default_factory=list)
    index: int = 0
    events: asyncio.Queue[tuple[str, object]] = field(default_factory=asyncio.Queue)
    accept_pending: str = ""
    """The accept key pressed while text was still streaming: insert when it is done."""
    trigger_accepts: bool = False
    """No accept key could be taken: the completion shortcut pressed again inserts."""
    accept_chords: tuple[str, ...] = ()

    @property
    def current(self) -> _Alternative:
        return self.alternatives[self.index]


class PreviewController:
    """Runs one preview at a time for the pipeline; :meth:`command` is the Core's entry."""

    def __init__(
        self, desktop: Desktop, settings: Settings | Reader[Settings], bus: EventBus
    ) -> None:
        self._desktop = desktop
        self._read_settings = reader(settings)
        self._bus = bus
        self._count = 0
        self._session: _Session | None = None
        self.last_reason = ""

    @property
    def _settings(self) -> Settings:
        """The settings in force: the next preview uses their keys and backend chain."""
        return self._read_settings()

    @property
    def visible(self) -> bool:
        return self._session is not None

    @property
    def trigger_accepts(self) -> bool:
        """A completion shortcut pressed now inserts the preview (see :data:`TRIGGER_HINT`)."""
        return self._session is not None and self._session.trigger_accepts

    def command(self, command: PreviewCommand) -> bool:
        session = self._session
        if session is None:
            return False
        session.events.put_nowait(("command", command))
        return True

    def key_bindings(self, accept: tuple[str, ...] | None = None) -> dict[str, Hotkey]:
        ui = self._settings.ui
        keys: dict[str, Hotkey] = {}
        for n, chord in enumerate(ui.preview_accept_keys if accept is None else accept):
            keys[f"accept{n}"] = parse_hotkey(chord)
        keys["dismiss"] = parse_hotkey(ui.preview_dismiss_key)
        keys["next"] = parse_hotkey(ui.preview_next_key)
        keys["previous"] = parse_hotkey(ui.preview_previous_key)
        return keys

    async def run(
        self,
        request: CompletionRequest,
        target: Target,
        completer: Completer,
        look: Look | None = None,
    ) -> Completion | None:
        """Show the preview for ``request`` until the user accepts (the completion to
        insert is returned) or it closes (None; :attr:`last_reason` says why).

        ``look``: a suggestion as you type (only Tab accepts: Enter must reach the
        application as a new line) and what the app told of its font."""
        look = look or Look()
        if look.auto:
            # Nothing shows and no key is taken until there is something to show: the
            # user typing on meanwhile cancels the request (the suggester's trigger).
            known = await self._answer_first(request, target, completer)
            if known is None:
                return None
            completer = known
        session = self._open(request, target, completer, look)
        context = session.context
        bindings = self.key_bindings(session.accept_chords)
        reason = "cancelled"
        grabbed = False
        stop_watching: Callable[[], None] = _nothing
        focus_task: asyncio.Task[None] | None = None
        port = self._desktop.preview_input
        caret, screen = context.caret, None
        try:
            if port is not None:
                caret, screen = await port.locate(target, context.caret)
                own = await port.grab_keys(bindings, lambda name: self._on_key(session, name))
                grabbed = True
                refused = port.refused_keys
                session.trigger_accepts = all(
                    name in refused for name in bindings if name.startswith("accept")
                )
                for name in refused:
                    bindings.pop(name, None)  # the user's own binding: not in the hint line
                stop_watching = port.watch_activity(
                    lambda kind, code: self._on_activity(session, kind, code, own)
                )
            self._bus.publish(self._shown(session, look, caret, screen, bindings))
            focus_task = asyncio.create_task(self._watch_focus(session), name="preview-focus")
            self._start(session, request)
            result, reason = await self._decide(session)
            return result
        finally:
            self._session = None
            stop_watching()
            if focus_task is not None:
                focus_task.cancel()
            for alternative in session.alternatives:
                if alternative.task is not None and not alternative.task.done():
                    alternative.task.cancel()
                    await _settle(alternative.task)
            if grabbed and port is not None:
                await port.release_keys()
            passed = reason.removeprefix("pass:") if reason.startswith("pass:") else ""
            if passed:
                reason = _with_error(
                    session, f"nothing to accept yet; {passed} went to the application"
                )
            self.last_reason = reason
            self._bus.publish(PreviewClosed(session.preview_id, "passed" if passed else reason))
            if passed:
                # Nothing to accept: the key belongs to the application after all, but
                # only once the user let go of it: X does not deliver a fresh press of a
                # key that is still down, so a replay then was lost. The grab is already
                # ended, so keys typed meanwhile go straight to the application.
                timeout = self._settings.hotkeys.modifier_release_timeout_ms / 1000
                if not await self._desktop.keys.wait_released(timeout):
                    log.warning("%s still held; sending it to the application anyway", passed)
                await self._desktop.keys.press(passed)

    def _open(
        self, request: CompletionRequest, target: Target, completer: Completer, look: Look
    ) -> _Session:
        self._count += 1
        chain = request.backends or tuple(self._settings.routing.default)
        accept = (
            SUGGESTION_ACCEPT_KEYS if look.auto else tuple(self._settings.ui.preview_accept_keys)
        )
        session = _Session(
            self._count, request.context, target, chain, completer, accept_chords=accept
        )
        self._session = session
        return session

    def _shown(
        self,
        session: _Session,
        look: Look,
        caret: CaretRect | None,
        screen: ScreenArea | None,
        bindings: dict[str, Hotkey],
    ) -> PreviewShown:
        context, suggestions = session.context, self._settings.suggestions
        return PreviewShown(
            preview_id=session.preview_id,
            app=session.target.app,
            caret=caret,
            line_before=context.prefix.rsplit("\n", 1)[-1][-LINE_CONTEXT_CHARS:],
            line_after=context.suffix.split("\n", 1)[0][:LINE_CONTEXT_CHARS],
            monospace=context_looks_like_code(context.prefix, context.suffix),
            keys=tuple((name, str(hotkey)) for name, hotkey in bindings.items()),
            screen=screen,
            hint=TRIGGER_HINT if session.trigger_accepts else "",
            style=suggestions.style_for(look.auto),
            auto=look.auto,
            font_family=look.font_family,
            font_size=look.font_size,
            lines=suggestions.ghost_lines,
        )

    async def _answer_first(
        self, request: CompletionRequest, target: Target, completer: Completer
    ) -> Completer | None:
        """A suggestion as you type: its whole answer first, then the preview (None, with
        :attr:`last_reason`, when there is nothing to show or the focus moved)."""
        try:
            completion = await completer.complete(request)
        except RequestDropped:
            raise
        except AnyfillError as exc:
            self.last_reason = f"failed (the backend failed: {exc})"
            return None
        if not completion.middle:
            self.last_reason = "empty"
            return None
        focused = self._desktop.windows.focused()
        if focused is None or focused.window_id != target.window_id:
            self.last_reason = "focus"
            return None
        return _Answered(completion)

    # -- the decision loop ------------------------------------------------------------

    async def _decide(self, session: _Session) -> tuple[Completion | None, str]:
        while True:
            kind, value = await session.events.get()
            if kind == "done":
                alternative = value
                assert isinstance(alternative, _Alternative)
                if alternative is session.current and session.accept_pending:
                    if alternative.completion is not None and alternative.completion.middle:
                        return alternative.completion, "accepted"
                    return None, _with_error(session, "empty")
                continue
            if kind == "closed":
                return None, _with_error(session, str(value))
            command = str(value)
            if command.startswith("accept"):
                key = command.partition(":")[2]
                current = session.current
                if current.completion is not None:
                    if current.completion.middle:
                        return current.completion, "accepted"
                    return None, f"pass:{key}" if key else "empty"
                if current.text and current.task is not None:
                    session.accept_pending = key or "accept"
                    continue
                return None, f"pass:{key}" if key else "dismissed"
            if command == "dismiss":
                return None, _with_error(session, "dismissed")
            if command in ("next", "previous"):
                self._cycle(session, 1 if command == "next" else -1)

    def _on_key(self, session: _Session, name: str) -> None:
        if name.startswith("accept"):
            chord = session.accept_chords[int(name.removeprefix("accept"))]
            session.events.put_nowait(("command", f"accept:{chord}"))
        else:
            session.events.put_nowait(("command", name))

    def _on_activity(self, session: _Session, kind: str, code: int, own: frozenset[int]) -> None:
        if kind == "key" and code in own:
            return  # our popup keys and the modifiers: not the user typing in the app
        if self._desktop.keys.injecting:
            return
        if kind == "focus":  # code: the window now focused
            if code != session.target.window_id:
                session.events.put_nowait(("closed", "focus"))
            return
        if kind == "text" and session.target.pid is not None and code != session.target.pid:
            return  # code: the process whose text changed; another app's is not typing
        session.events.put_nowait(("closed", "typing" if kind in ("key", "text") else "click"))

    async def _watch_focus(self, session: _Session) -> None:
        while True:
            await asyncio.sleep(FOCUS_POLL_S)
            focused = self._desktop.windows.focused()
            if focused is None or focused.window_id != session.target.window_id:
                session.events.put_nowait(("closed", "focus"))
                return

    # -- alternatives -----------------------------------------------------------------

    def _start(
        self,
        session: _Session,
        request: CompletionRequest | None,
        then: CompletionRequest | None = None,
    ) -> None:
        first = request or then
        assert first is not None
        alternative = _Alternative(first, then=then if request is not None else None)
        asked = (request.backends or session.chain) if request is not None else ()
        if request is None:
            alternative.how = "another sample"
        session.alternatives.append(alternative)
        session.index = len(session.alternatives) - 1
        started = time.monotonic()
        number = session.index

        def on_text(text: str) -> None:
            if alternative.first_text_ms is None:
                alternative.first_text_ms = (time.monotonic() - started) * 1000
            alternative.text = text
            if session.index == number:
                self._bus.publish(
                    PreviewText(
                        session.preview_id,
                        text,
                        alternative.backend,
                        ms=alternative.first_text_ms,
                        alternative=number,
                        how=alternative.how,
                    )
                )

        async def ask() -> Completion:
            try:
                return await session.completer.complete(alternative.request, on_text)
            except RequestDropped:
                raise
            except AnyfillError as exc:
                then = alternative.then
                alternative.tried = asked
                if then is None:
                    raise
                # No other backend answers: the one that did gives another sample.
                log.info("no other backend answers (%s); asking for another sample", exc)
                alternative.request, alternative.then = then, None
                alternative.how = "another sample"
                return await session.completer.complete(then, on_text)

        async def complete() -> Completion:
            try:
                completion = await ask()
            except RequestDropped:
                raise
            except AnyfillError as exc:
                alternative.error = str(exc)
                self._show(session, number)
                session.events.put_nowait(("done", alternative))
                raise
            alternative.completion = completion
            alternative.backend = completion.backend
            if alternative.request.sample == 0 and completion.backend in asked:
                alternative.tried = asked[: asked.index(completion.backend) + 1]
            if number > 0 and not alternative.how:
                alternative.how = "next backend"
            self._show(session, number)
            session.events.put_nowait(("done", alternative))
            return completion

        alternative.task = asyncio.create_task(complete(), name=f"preview-{first.id}")
        alternative.task.add_done_callback(_consume)

    def _show(self, session: _Session, number: int) -> None:
        if session.index != number:
            return
        alternative = session.alternatives[number]
        completion = alternative.completion
        self._bus.publish(
            PreviewText(
                session.preview_id,
                completion.middle if completion is not None else alternative.text,
                alternative.backend,
                final=completion is not None or bool(alternative.error),
                ms=completion.ms if completion is not None else None,
                alternative=number,
                error=alternative.error,
                how=alternative.how,
            )
        )

    def _cycle(self, session: _Session, step: int) -> None:
        target = session.index + step
        if target < 0:
            return
        if target < len(session.alternatives):
            session.index = target
            self._show(session, target)
            return
        base = session.alternatives[0].request
        chain = session.chain
        rotation = target % len(chain) if chain else 0
        rotated = chain[rotation:] + chain[:rotation]
        answered = [a.backend for a in session.alternatives if a.completion is not None]
        tried = {name for a in session.alternatives for name in a.tried}
        fresh = tuple(name for name in rotated if name not in tried)
        # The backend whose answer was shown first gives another sample, seeded by the
        # alternative's number (a different one for each).
        again = answered[0] if answered else (chain[0] if chain else "")
        sample = replace(
            base, id=new_request_id(), backends=(again,) if again else (), sample=target
        )
        if fresh:
            self._start(session, replace(base, id=new_request_id(), backends=fresh), then=sample)
        else:
            self._start(session, None, then=sample)


class _Answered:
    """A completer that already has its answer (a suggestion asked before it showed)."""

    def __init__(self, completion: Completion) -> None:
        self._completion = completion

    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: OnChunk | None = None,
    ) -> Completion:
        return replace(self._completion, request_id=request.id)

    async def cancel(self, request_id: str) -> bool:
        return False


def _with_error(session: _Session, reason: str) -> str:
    """The reason a preview closed, with the backend's failure when it had one."""
    error = session.current.error if session.alternatives else ""
    return f"{reason} (the backend failed: {error})" if error else reason


def looks_like_code(text: str) -> bool:
    """Monospace for code: indentation, brackets or keywords near the caret."""
    return sum(hint in text for hint in _CODE_HINTS) >= 2


def context_looks_like_code(prefix: str, suffix: str) -> bool:
    """The text near the caret, and the start of the caret's line: on a very long line of
    code the 400 characters before the caret may hold no bracket or keyword
    (``... + weights[39] * values[39]``) while its indentation and ``=`` are further back."""
    line_start = prefix.rsplit("\n", 1)[-1][:80]
    return looks_like_code(line_start + "\n" + prefix[-400:] + suffix[:200])


def _nothing() -> None:
    return None


def _consume(task: asyncio.Task[Completion]) -> None:
    if not task.cancelled():
        task.exception()  # reported through the session; do not log it as unretrieved


async def _settle(task: asyncio.Task[Completion]) -> None:
    with contextlib.suppress(asyncio.CancelledError, AnyfillError):
        await task

"""The engine: context in, exact middle out.

``Engine`` implements :class:`~anyfill.daemon.completion.Completer`. It trims the context
to the configured sizes, decides single-line mode, hands the FIM prompt to a dispatcher
(which drives the backends), and post-processes the raw answer with the stop strings of
the plan the answering backend used. It owns the backends and their HTTP clients and is
an async context manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from types import TracebackType

import httpx

from anyfill.config.model import BackendConfig, Settings
from anyfill.config.secrets import resolve_api_key
from anyfill.daemon.backends.base import Backend, FimPrompt, Plan, Usage
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.backends.leases import Leases
from anyfill.daemon.backends.registry import create_backend
from anyfill.daemon.bus import EventBus, RequestEnded, RequestStarted
from anyfill.daemon.completion import (
    Attempt,
    Completion,
    CompletionRequest,
    Dispatcher,
    Finished,
    OnChunk,
    Planned,
    Streamed,
    Text,
)
from anyfill.daemon.errors import AnyfillError, ProtocolError, RequestDropped, Told
from anyfill.daemon.fim.chat import extract_middle
from anyfill.daemon.fim.postprocess import clean, wants_single_line
from anyfill.daemon.log import register_secret, secret_header_values
from anyfill.daemon.scheduler import Scheduler

__all__ = ["DispatcherFactory", "Engine", "trim_context"]

DispatcherFactory = Callable[[Mapping[str, Backend], Settings], Dispatcher]
"""Builds the dispatcher once the engine has built the backends (the scheduler's hook)."""

MAX_ANSWER_CHARS = 1 << 19
"""Longest raw answer taken (524,288 characters): 32,768 tokens (the most a request may
ask for) of 16 characters each. A server that sends more is broken or hostile; its
answer is refused instead of growing in memory."""

#: A cut context starts at a line boundary when one is this close to the cut.
_LINE_SNAP = 200


def trim_context(prefix: str, suffix: str, max_prefix: int, max_suffix: int) -> tuple[str, str]:
    """Keep the end of the prefix and the start of the suffix, cut at line boundaries
    when one is near, so the prompt (and the server's KV cache) stays stable while typing."""
    if len(prefix) > max_prefix:
        prefix = prefix[len(prefix) - max_prefix :]
        newline = prefix.find("\n", 0, _LINE_SNAP)
        if 0 <= newline < len(prefix) - 1:
            prefix = prefix[newline + 1 :]
    if len(suffix) > max_suffix:
        suffix = suffix[:max_suffix]
        newline = suffix.rfind("\n", max(0, len(suffix) - _LINE_SNAP))
        if newline > 0:
            suffix = suffix[: newline + 1]
    return prefix, suffix


def register_secrets(config: BackendConfig, key: str | None) -> None:
    """Every credential this backend holds is masked wherever it would be printed or
    logged (an error body may echo it)."""
    register_secret(key)
    for value in secret_header_values(config.headers):
        register_secret(value)


class Engine:
    """Answers completion requests with the backends of ``settings``.

    ``dispatcher``: a ready dispatcher, or a factory called with the built backends; the
    default is the :class:`~anyfill.daemon.scheduler.Scheduler` over ``routing`` (limits,
    cooldowns, latest-wins, fallback, hedging); ``SequentialDispatcher`` is the simple
    alternative. ``backends``: use
    these instead of building them from the settings (tests, embedding).
    """

    def __init__(
        self,
        settings: Settings,
        dispatcher: Dispatcher | DispatcherFactory | None = None,
        *,
        backends: Mapping[str, Backend] | None = None,
        environ: Mapping[str, str] | None = None,
        bus: EventBus | None = None,
        leases: Leases | None = None,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.leases = leases
        """Shared with the engines before and after this one: a managed server whose
        settings did not change keeps running across them."""
        """Where the default scheduler publishes its metrics and cooldowns (tray, MQTT)."""
        self._dispatcher_arg = dispatcher
        self._given_backends = backends
        self._environ = os.environ if environ is None else environ
        self.backends: dict[str, Backend] = {}
        self.unusable: dict[str, AnyfillError] = {}
        self._clients: list[httpx.AsyncClient] = []
        self._dispatcher: Dispatcher | None = None
        self._owned_scheduler: Scheduler | None = None
        self._running: dict[str, asyncio.Task[Completion]] = {}
        self._cancelled: set[str] = set()
        self._entered = False

    @property
    def dispatcher(self) -> Dispatcher:
        if self._dispatcher is None:
            raise RuntimeError("use 'async with Engine(...)' before completing")
        return self._dispatcher

    async def __aenter__(self) -> Engine:
        if self._entered:
            raise RuntimeError("an Engine is not reentrant")
        self._entered = True
        if self._given_backends is not None:
            self.backends = dict(self._given_backends)
        else:
            self._build_backends()
        arg = self._dispatcher_arg
        if arg is None:
            from anyfill.daemon.scheduler import build_scheduler

            self._owned_scheduler = build_scheduler(
                self.backends, self.settings, unusable=self.unusable, bus=self.bus
            )
            self._dispatcher = self._owned_scheduler
        elif callable(arg) and not hasattr(arg, "dispatch"):
            self._dispatcher = arg(self.backends, self.settings)
        else:
            self._dispatcher = arg
        return self

    def _build_backends(self) -> None:
        for config in self.settings.backends:
            if not config.enabled:
                continue
            try:
                key = resolve_api_key(config, self._environ)
            except AnyfillError as exc:  # kept: raised when a request reaches this backend
                self.unusable[config.name] = exc
                continue
            register_secrets(config, key)
            client = make_client(config)
            self._clients.append(client)
            self.backends[config.name] = create_backend(
                config, client, key, bus=self.bus, models=self.settings.models, leases=self.leases
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in list(self._running.values()):
            task.cancel()
        for task in list(self._running.values()):
            with contextlib.suppress(asyncio.CancelledError, AnyfillError):
                await task
        if self._owned_scheduler is not None:
            await self._owned_scheduler.aclose()
            self._owned_scheduler = None
        if self._given_backends is None:
            for backend in self.backends.values():
                await backend.aclose()  # a managed server stops, a broker link closes
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        self._entered = False

    # -- Completer --------------------------------------------------------------------------

    def prompt_for(self, request: CompletionRequest) -> FimPrompt:
        """The FIM question for ``request``: trimmed context and the single-line decision."""
        context = request.context
        limits = self.settings.completion
        prefix, suffix = trim_context(
            context.prefix, context.suffix, limits.max_prefix_chars, limits.max_suffix_chars
        )
        single_line = request.single_line
        if single_line is None:
            single_line = wants_single_line(prefix, suffix, limits.single_line)
        return FimPrompt(
            prefix=prefix,
            suffix=suffix,
            max_tokens=request.max_tokens or 0,
            single_line=single_line,
            language=context.language,
            filename=context.filename,
            extra=context.extra,
            request_id=request.id,
            sample=request.sample,
        )

    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: OnChunk | None = None,
    ) -> Completion:
        if request.id in self._running:
            raise RuntimeError(f"request {request.id} is already running")
        task = asyncio.create_task(
            self._complete(request, on_text, on_chunk), name=f"complete-{request.id}"
        )
        self._running[request.id] = task
        bus = self.bus
        if bus is not None and bus.has_audience:
            context = request.context
            bus.publish(
                RequestStarted(
                    request.id, request.priority, context.method, context.prefix, context.suffix
                )
            )
            task.add_done_callback(lambda done: _announce_end(bus, request.id, done))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if request.id in self._cancelled and task.cancelled():
                raise RequestDropped(request.id, "cancelled") from None
            task.cancel()  # our caller was cancelled: stop the backends too
            with contextlib.suppress(asyncio.CancelledError, AnyfillError):
                await task
            raise
        finally:
            self._running.pop(request.id, None)
            self._cancelled.discard(request.id)

    async def cancel(self, request_id: str) -> bool:
        task = self._running.get(request_id)
        if task is None or task.done():
            return False
        self._cancelled.add(request_id)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, AnyfillError):
            await task
        return True

    async def _complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None,
        on_chunk: OnChunk | None,
    ) -> Completion:
        prompt = self.prompt_for(request)
        started = time.monotonic()
        backend = ""
        plan: Plan | None = None
        raw: list[str] = []
        size = 0
        so_far = ""
        restart = False
        first_token_ms: float | None = None
        usage = Usage()
        events = self.dispatcher.dispatch(request, prompt)
        async with closing_stream(events) as stream:
            async for event in stream:
                if isinstance(event, Attempt):
                    restart = restart or bool(raw)  # text was handed on: it is void now
                    backend, plan, raw, first_token_ms = event.backend, None, [], None
                    size, so_far = 0, ""
                elif isinstance(event, Planned):
                    plan = event.plan
                elif isinstance(event, Text):
                    if first_token_ms is None:
                        first_token_ms = (time.monotonic() - started) * 1000
                    size += len(event.chunk)
                    if size > MAX_ANSWER_CHARS:
                        raise ProtocolError(
                            backend,
                            f"backend '{backend}' sent more than {MAX_ANSWER_CHARS} characters; "
                            "its answer was refused, nothing inserted",
                        )
                    raw.append(event.chunk)
                    if on_chunk is not None:
                        on_chunk(Streamed(event.chunk, restart))
                    restart = False
                    if on_text is not None:
                        so_far += event.chunk  # only for a caller that shows the whole text
                        on_text(so_far)
                elif isinstance(event, Finished):
                    usage = event.usage
        if plan is None:
            raise ProtocolError(backend or "?", f"backend '{backend}' never said how it asked")
        text = "".join(raw)
        if not text.isascii() and not _is_unicode(text):
            raise ProtocolError(
                backend,
                f"backend '{backend}' sent text with a lone surrogate, which is not Unicode; "
                "its answer was refused, nothing inserted",
            )
        return Completion(
            request_id=request.id,
            middle=finish(text, plan, prompt),
            raw=text,
            backend=backend,
            plan=plan,
            ms=(time.monotonic() - started) * 1000,
            first_token_ms=first_token_ms,
            usage=usage,
        )


def _announce_end(bus: EventBus, request_id: str, task: asyncio.Task[Completion]) -> None:
    if task.cancelled():
        bus.publish(RequestEnded(request_id, ok=False, error="RequestDropped: cancelled"))
        return
    error = task.exception()
    if error is not None:
        bus.publish(
            RequestEnded(
                request_id,
                ok=False,
                error=f"{type(error).__name__}: {error}",
                failure=Told.of(error, named=True),
            )
        )
        return
    done = task.result()
    bus.publish(
        RequestEnded(
            request_id,
            ok=True,
            backend=done.backend,
            ms=done.ms,
            first_token_ms=done.first_token_ms,
            prompt_tokens=done.usage.prompt_tokens,
            completion_tokens=done.usage.completion_tokens,
            middle=done.middle,
        )
    )


def _is_unicode(text: str) -> bool:
    """False for text with a lone surrogate (a JSON ``"\\ud800"`` escape decodes to one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def finish(raw: str, plan: Plan, prompt: FimPrompt) -> str:
    """The exact middle from a raw answer: chat replies are unwrapped first."""
    text = extract_middle(raw) if plan.mode == "chat" else raw
    return clean(
        text,
        prompt.prefix,
        prompt.suffix,
        stop=plan.stop,
        single_line=prompt.single_line,
        # A server's own FIM with a model we cannot name: any family's sentinel may leak.
        family_known=plan.mode != "native" or bool(plan.template),
    )

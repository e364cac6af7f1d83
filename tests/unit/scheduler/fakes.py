"""A backend double at the protocol boundary: the Backend ABC, driven by a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from anyfill.config.model import BackendConfig, Limits, Price, Timeouts
from anyfill.daemon.backends.base import (
    Backend,
    BatchResult,
    Capabilities,
    FimPrompt,
    Plan,
    StreamObserver,
    Usage,
)
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.scheduler.clock import ManualClock


@dataclass
class Reply:
    """What the fake server does for one request."""

    chunks: tuple[str, ...] = ("hello", " world")
    first_delay: float = 0.0
    chunk_delay: float = 0.0
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    error: Exception | None = None
    error_after: int = 0
    """Raise ``error`` after this many chunks (0: before any text)."""
    usage: Usage | None = None
    plan: Plan | None = field(default_factory=lambda: Plan(mode="native"))


@dataclass
class Call:
    prompt: FimPrompt
    started: float
    ended: float | None = None
    completed: bool = False
    """The whole answer was sent (False: the client went away or it failed)."""


class FakeBackend(Backend):
    type_name = "fake"
    capabilities = Capabilities(native_suffix=True)

    def __init__(
        self,
        name: str,
        clock: ManualClock,
        *,
        url: str = "http://127.0.0.1:9",
        api_key: str | None = None,
        limits: Limits | None = None,
        timeouts: Timeouts | None = None,
        price: Price | None = None,
        default: Reply | None = None,
    ) -> None:
        config = BackendConfig(
            name=name,
            type="llamacpp",
            url=url,
            limits=limits or Limits(max_concurrent=8),
            timeouts=timeouts or Timeouts(),
            price=price or Price(),
        )
        super().__init__(config, None, api_key)  # type: ignore[arg-type]
        self.clock = clock
        self.script: list[Reply] = []
        self.default = default or Reply()
        self.calls: list[Call] = []
        self.open = 0

    def next_reply(self) -> Reply:
        return self.script.pop(0) if self.script else self.default

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        call = Call(prompt, self.clock.now())
        self.calls.append(call)
        reply = self.next_reply()
        self.open += 1
        try:
            if reply.first_delay:
                await self.clock.sleep_until(self.clock.now() + reply.first_delay)
            if observer is not None:
                observer.on_response(reply.status, reply.headers)
            if reply.error is not None and reply.error_after == 0:
                raise reply.error
            if observer is not None and reply.plan is not None:
                observer.on_plan(reply.plan)
            for index, chunk in enumerate(reply.chunks):
                if index and reply.chunk_delay:
                    await self.clock.sleep_until(self.clock.now() + reply.chunk_delay)
                yield chunk
                if reply.error is not None and index + 1 == reply.error_after:
                    raise reply.error
            if observer is not None and reply.usage is not None:
                observer.on_usage(reply.usage)
            call.completed = True
        finally:
            self.open -= 1
            call.ended = self.clock.now()

    async def health(self) -> None:
        return None

    @property
    def prompts_sent(self) -> list[str]:
        return [call.prompt.prefix for call in self.calls]


class FakeBatchBackend(FakeBackend):
    capabilities = Capabilities(raw_prompt=True, prompt_list=True)

    def __init__(self, name: str, clock: ManualClock, *, batch_delay: float = 0.2, **kw: object):
        super().__init__(name, clock, **kw)  # type: ignore[arg-type]
        self.batch_delay = batch_delay
        self.batches: list[list[str]] = []
        self.batch_open = 0
        self.batch_completed = 0
        self.batch_error: Exception | None = None

    async def complete_batch(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        self.batches.append([p.prefix for p in prompts])
        self.batch_open += 1
        try:
            await self.clock.sleep_until(self.clock.now() + self.batch_delay)
            if observer is not None:
                observer.on_response(200, {})
            if self.batch_error is not None:
                raise self.batch_error
            self.batch_completed += 1
            return [
                BatchResult(
                    text=f"<{p.prefix}>", usage=Usage(prompt_tokens=10, completion_tokens=2)
                )
                for p in prompts
            ]
        finally:
            self.batch_open -= 1


def request(
    rid: str,
    *,
    target: str = "app",
    window: int | None = 1,
    priority: str = "interactive",
    backends: tuple[str, ...] = (),
    deadline: float | None = None,
) -> CompletionRequest:
    return CompletionRequest(
        context=Context(prefix="p", suffix="s", app=target, window_id=window),
        id=rid,
        priority=priority,  # type: ignore[arg-type]
        backends=backends,
        deadline=deadline,
    )


def prompt(prefix: str = "def f(", suffix: str = "):\n") -> FimPrompt:
    return FimPrompt(prefix=prefix, suffix=suffix)

"""The simple dispatcher: try the backend chain in order, one at a time.

A backend that fails with a retryable error (nothing listens, timeout, rate limit, 5xx,
broken stream) hands over to the next; a non-retryable one (refused key, unknown model,
bad request) stops the chain, because the user has to fix something. The scheduler
(``daemon/scheduler``) replaces this with limits, cooldowns and hedging.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from anyfill.daemon.backends.base import Backend, FimPrompt, Plan, Usage
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.completion import (
    Attempt,
    CompletionRequest,
    DispatchEvent,
    Finished,
    Planned,
    Text,
)
from anyfill.daemon.errors import AnyfillError, ConfigError, RequestDropped

__all__ = ["SequentialDispatcher"]


@dataclass
class _Observer:
    plan: Plan | None = None
    usage: Usage | None = None

    def on_response(self, status: int, headers: Mapping[str, str]) -> None:
        pass

    def on_usage(self, usage: Usage) -> None:
        self.usage = usage

    def on_plan(self, plan: Plan) -> None:
        self.plan = plan


class SequentialDispatcher:
    """Tries ``request.backends`` (else ``default_chain``) in order."""

    def __init__(
        self,
        backends: Mapping[str, Backend],
        default_chain: Sequence[str],
        *,
        fallback: bool = True,
        unusable: Mapping[str, AnyfillError] | None = None,
    ) -> None:
        self.backends = backends
        self.default_chain = tuple(default_chain)
        self.fallback = fallback
        self.unusable = dict(unusable or {})
        """Backends that could not be built (e.g. a missing key): their error is raised
        when the chain reaches them."""

    def _backend(self, name: str) -> Backend:
        if name in self.unusable:
            raise self.unusable[name]
        try:
            return self.backends[name]
        except KeyError:
            known = ", ".join(sorted({*self.backends, *self.unusable})) or "none"
            raise ConfigError(f"no enabled backend named '{name}' (configured: {known})") from None

    async def dispatch(
        self, request: CompletionRequest, prompt: FimPrompt
    ) -> AsyncIterator[DispatchEvent]:
        chain = request.backends or self.default_chain
        if not chain:
            raise ConfigError("no backend to ask: routing.default is empty")
        last: AnyfillError | None = None
        for position, name in enumerate(chain):
            if request.deadline is not None and time.monotonic() > request.deadline:
                raise RequestDropped(request.id, "past its deadline")
            try:
                backend = self._backend(name)
                observer = _Observer()
                yield Attempt(name)
                planned = False
                async with closing_stream(backend.stream(prompt, observer)) as chunks:
                    async for chunk in chunks:
                        if not planned and observer.plan is not None:
                            planned = True
                            yield Planned(observer.plan)
                        yield Text(chunk)
                if not planned and observer.plan is not None:
                    yield Planned(observer.plan)
                yield Finished(observer.usage or Usage())
                return
            except AnyfillError as exc:
                last = exc
                is_last = position == len(chain) - 1
                if not exc.retryable or not self.fallback or is_last:
                    raise
        assert last is not None
        raise last

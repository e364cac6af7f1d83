"""The seams between capture, the request path and delivery: the request types every
layer may import (it imports nothing of anyfill but the context).

``Completer`` is what the desktop path, the CLI and MQTT call: context in, exact middle
out. ``Dispatcher`` is the part of the request path that picks and drives backends
(a direct sequential one for simple use, the scheduler with limits, cancellation,
fallback and hedging for the daemon); it reports what happens as events so the caller
knows which backend answered and how it asked.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from anyfill.daemon.context import Context

PromptMode = Literal["native", "template", "chat"]


@dataclass(frozen=True)
class FimPrompt:
    """One fill-in-the-middle question."""

    prefix: str
    suffix: str
    max_tokens: int = 128
    """Answer length limit; 0 (what the Engine sends unless asked) means each backend's
    configured ``max_tokens``."""
    temperature: float = 0.1
    stop: tuple[str, ...] = ()
    single_line: bool = False
    language: str = ""
    filename: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    request_id: str = ""
    sample: int = 0
    """0: the backend's usual answer. N > 0: another sample for the preview's Alt+] (the
    usual one is already shown): seed N and a temperature of at least
    ``ALTERNATIVE_TEMPERATURE``, never served from or kept in the cache."""


@dataclass(frozen=True)
class Plan:
    """How a backend will ask for one prompt: what post-processing needs to know."""

    mode: PromptMode
    template: str = ""
    """Template family name when ``mode == 'template'`` (or the server's, when known)."""
    stop: tuple[str, ...] = ()
    """Stop strings in force (template stops + the user's); the cleaner cuts at them too."""
    note: str = ""
    """Why this plan was chosen, when it was a fallback (e.g. '/infill answered 501')."""


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


Priority = Literal["interactive", "prefetch", "batch"]

_ids = itertools.count(1)


def new_request_id() -> str:
    return f"r{next(_ids)}"


@dataclass(frozen=True)
class CompletionRequest:
    context: Context
    id: str = field(default_factory=new_request_id)
    priority: Priority = "interactive"
    backends: tuple[str, ...] = ()
    """Backend chain to try, in order; empty means the routing profile's default."""
    max_tokens: int | None = None
    single_line: bool | None = None
    """None: decide from the context (``completion.single_line`` setting)."""
    deadline: float | None = None
    """``time.monotonic()`` after which the request is dropped unsent."""
    sample: int = 0
    """Another sample than the usual answer (see :attr:`FimPrompt.sample`)."""


@dataclass(frozen=True)
class Completion:
    request_id: str
    middle: str
    """Exactly the text that belongs between prefix and suffix."""
    raw: str
    """What the backend returned before post-processing."""
    backend: str
    plan: Plan
    ms: float
    first_token_ms: float | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Streamed:
    """One piece of raw text as a backend streams it."""

    chunk: str
    restart: bool = False
    """A fallback backend started over: the text before this chunk is void."""


OnChunk = Callable[[Streamed], None]


class Completer(Protocol):
    async def complete(
        self,
        request: CompletionRequest,
        on_text: Callable[[str], None] | None = None,
        *,
        on_chunk: OnChunk | None = None,
    ) -> Completion:
        """Answer ``request``; ``on_text`` sees the raw text so far (live previews),
        ``on_chunk`` each piece as it comes (what a stream forwards: no text joined)."""
        ...

    async def cancel(self, request_id: str) -> bool:
        """Cancel a running request; True when one was running."""
        ...


@dataclass(frozen=True)
class Attempt:
    """A backend starts answering (after a fallback, earlier text is void)."""

    backend: str


@dataclass(frozen=True)
class Planned:
    plan: Plan


@dataclass(frozen=True)
class Text:
    chunk: str


@dataclass(frozen=True)
class Finished:
    usage: Usage = field(default_factory=Usage)


DispatchEvent = Attempt | Planned | Text | Finished


class Dispatcher(Protocol):
    def dispatch(
        self, request: CompletionRequest, prompt: FimPrompt
    ) -> AsyncIterator[DispatchEvent]:
        """Drive backends for ``prompt`` and report what happens.

        Raises the last backend's error when no backend could answer, or
        :class:`~anyfill.daemon.errors.RequestDropped` when the request was superseded,
        cancelled or past its deadline.
        """
        ...

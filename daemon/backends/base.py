"""The contract every backend implements.

A backend turns a :class:`FimPrompt` (prefix, suffix, limits) into text chunks from one
wire API. It decides how to ask: the server's native FIM field, a model template sent as a
raw prompt, or a chat prompt. Scheduling, rate limits, fallback and post-processing live
outside; a backend only speaks its protocol and maps failures to ``anyfill.daemon.errors``.

Cancellation: when the consumer stops iterating (``aclose()`` or task cancellation) the
backend closes its HTTP/1.1 response at once; that closes the socket, which is the only
signal that makes llama.cpp, Ollama and vLLM stop generating.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import httpx

from anyfill.config.model import BackendConfig, ModelsConfig
from anyfill.daemon.completion import FimPrompt, Plan, PromptMode, Usage

if TYPE_CHECKING:
    from typing import Self

    from anyfill.daemon.backends.leases import Leases
    from anyfill.daemon.bus import EventBus

__all__ = [
    "Backend",
    "BackendContext",
    "BatchResult",
    "Capabilities",
    "FimPrompt",
    "Plan",
    "PromptMode",
    "StreamObserver",
    "Usage",
]


@dataclass(frozen=True)
class Capabilities:
    native_suffix: bool = False
    """The server takes prefix and suffix itself (``/infill``, ``suffix`` field, FIM API)."""
    raw_prompt: bool = False
    """The server completes a raw prompt, so a model template can be applied client-side."""
    chat_only: bool = False
    """Only a chat API: infill through an instruction prompt."""
    prompt_list: bool = False
    """One request may carry several prompts (batching)."""
    streaming: bool = True


class StreamObserver(Protocol):
    """Receives what the scheduler needs from a response besides its text."""

    def on_response(self, status: int, headers: Mapping[str, str]) -> None:
        """Called once the status line and headers arrived (rate-limit headers live here)."""

    def on_usage(self, usage: Usage) -> None:
        """Called when the server reports token usage."""

    def on_plan(self, plan: Plan) -> None:
        """Called once the backend decided how to ask."""


@dataclass
class BatchResult:
    """One prompt's answer inside a batched request."""

    text: str = ""
    error: Exception | None = None
    usage: Usage = field(default_factory=Usage)
    plan: Plan | None = None
    """How this prompt was asked, when it differs from the batch's (one request each)."""


@dataclass(frozen=True)
class BackendContext:
    """What the daemon hands every backend it builds, besides its config, client and key.

    Most backends need none of it; one that runs something of its own (the managed
    llama-server) announces its state on ``bus`` and finds its model under ``models``.
    """

    bus: EventBus | None = None
    models: ModelsConfig | None = None
    leases: Leases | None = None
    """Where a backend leases what it runs (a managed server), so an engine rebuilt for
    other settings keeps it running (:mod:`anyfill.daemon.backends.leases`)."""


class Backend(abc.ABC):
    """Base of every backend type; each type is found by its ``type_name`` through the
    ``anyfill.backends`` entry points (:mod:`anyfill.daemon.backends.registry`)."""

    type_name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(
        self, config: BackendConfig, client: httpx.AsyncClient, api_key: str | None = None
    ) -> None:
        self.config = config
        self.client = client
        self.api_key = api_key

    @classmethod
    def create(
        cls,
        config: BackendConfig,
        client: httpx.AsyncClient,
        api_key: str | None = None,
        context: BackendContext | None = None,
    ) -> Self:
        """Build the backend for ``config``; a type that needs the context overrides this."""
        return cls(config, client, api_key)

    @property
    def name(self) -> str:
        return self.config.name

    @abc.abstractmethod
    def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        """Yield the raw text of the answer in chunks, as the server sends it."""

    async def complete_batch(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        """Answer several prompts in one request; only where ``capabilities.prompt_list``."""
        from anyfill.daemon.errors import UnsupportedFeature

        raise UnsupportedFeature(self.name, f"backend '{self.name}' cannot batch prompts")

    @abc.abstractmethod
    async def health(self) -> None:
        """Raise a BackendError when the server cannot serve now (for ``anyfill doctor``)."""

    async def aclose(self) -> None:  # noqa: B027 - an optional hook: most backends own nothing
        """Release what the backend owns besides its HTTP client (a managed server process)."""

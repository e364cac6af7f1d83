"""Mistral's FIM API, ``/v1/fim/completions`` (Codestral): prompt + suffix, natively.

Two hosts: ``https://codestral.mistral.ai`` takes Codestral keys, ``https://api.mistral.ai``
takes La Plateforme keys; a key used on the wrong host is refused with a 401, so that
message says which host goes with which key. The stream has the chat-chunk shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from anyfill.daemon.backends.base import Capabilities, FimPrompt, Plan, StreamObserver
from anyfill.daemon.backends.common import HttpBackend, join_url
from anyfill.daemon.backends.openai_completions import chat_delta_text, stream_openai

__all__ = ["MistralFimBackend"]

DEFAULT_MODEL = "codestral-latest"


class MistralFimBackend(HttpBackend):
    type_name = "mistral-fim"
    capabilities = Capabilities(native_suffix=True)

    def key_hint(self) -> str:
        return (
            " (a Codestral key works only with https://codestral.mistral.ai, a La Plateforme "
            "key only with https://api.mistral.ai)"
        )

    def model_name(self) -> str:
        return self.config.model or DEFAULT_MODEL

    def endpoint(self) -> str:
        return join_url(self.config.url, "/v1", "/fim/completions")

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        body: dict[str, Any] = {
            "model": self.model_name(),
            "prompt": prompt.prefix,
            "suffix": prompt.suffix,
            "max_tokens": self.max_tokens(prompt),
            **self.sampling(prompt, "random_seed"),
            "stream": True,
        }
        stops = self.stops((), prompt)
        if stops:
            body["stop"] = stops
        plan = Plan(mode="native", stop=self.plan_stops((), prompt))
        async for chunk in stream_openai(
            self,
            self.endpoint(),
            body,
            plan,
            observer=observer,
            deadline=deadline,
            text_of=chat_delta_text,
        ):
            yield chunk

    async def health(self) -> None:
        await self.probe(join_url(self.config.url, "/v1", "/models"))

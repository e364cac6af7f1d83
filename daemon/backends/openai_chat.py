"""OpenAI-style ``/v1/chat/completions``: infill through a chat prompt.

Works with OpenAI, OpenRouter, DeepSeek, vLLM, llama.cpp, LM Studio and Ollama's
OpenAI-compatible endpoint. The reply's text is parsed by the engine (``extract_middle``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from anyfill.daemon.backends.base import Capabilities, FimPrompt, StreamObserver
from anyfill.daemon.backends.chat import chat_plan, chat_prompt
from anyfill.daemon.backends.common import HttpBackend, join_url
from anyfill.daemon.backends.openai_completions import (
    STOP_LIMITS,
    chat_delta_text,
    stream_openai,
)

__all__ = ["OpenAIChatBackend"]

#: Newer OpenAI models refuse ``max_tokens`` and want ``max_completion_tokens``.
MAX_COMPLETION_TOKENS_HOSTS = ("api.openai.com",)


class OpenAIChatBackend(HttpBackend):
    type_name = "openai-chat"
    capabilities = Capabilities(chat_only=True)

    def endpoint(self) -> str:
        return join_url(self.config.url, "/v1", "/chat/completions")

    def max_stop(self) -> int | None:
        configured = super().max_stop()
        if configured is not None:
            return configured
        return STOP_LIMITS.get(self.host, 4)

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        chat = chat_prompt(prompt)
        plan = chat_plan(prompt, self.config.stop)
        limit_key = (
            "max_completion_tokens" if self.host in MAX_COMPLETION_TOKENS_HOSTS else "max_tokens"
        )
        body: dict[str, Any] = {
            "messages": [
                {"role": "system", "content": chat.system},
                {"role": "user", "content": chat.user},
            ],
            limit_key: self.max_tokens(prompt),
            **self.sampling(prompt),
            "stream": True,
            "stream_options": {"include_usage": True},
            "stop": list(plan.stop[: self.max_stop()]),
        }
        if self.config.model:
            body["model"] = self.config.model
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

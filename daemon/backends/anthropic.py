"""Anthropic Messages API (``/v1/messages``): infill through a chat prompt.

Named SSE events: text arrives in ``content_block_delta`` events, ``message_stop`` ends the
answer, ``ping`` is noise, ``error`` (e.g. ``overloaded_error``) can come mid-stream.
Current Claude models refuse an assistant prefill, so the prompt ends with the user turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from anyfill.daemon.backends.base import Capabilities, FimPrompt, StreamObserver, Usage
from anyfill.daemon.backends.chat import chat_plan, chat_prompt
from anyfill.daemon.backends.common import HttpBackend, join_url
from anyfill.daemon.backends.wire import cut_short, error_for_status, iter_sse, parse_json
from anyfill.daemon.errors import ProtocolError

__all__ = ["AnthropicBackend"]

API_VERSION = "2023-06-01"
DEFAULT_MODEL = "claude-haiku-4-5"
#: Error event types and the HTTP status they stand for, to map them like HTTP errors.
EVENT_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicBackend(HttpBackend):
    type_name = "anthropic"
    capabilities = Capabilities(chat_only=True)

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def model_name(self) -> str:
        return self.config.model or DEFAULT_MODEL

    def endpoint(self) -> str:
        return join_url(self.config.url, "/v1", "/messages")

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        chat = chat_prompt(prompt)
        plan = chat_plan(prompt, self.config.stop)
        body: dict[str, Any] = {
            "model": self.model_name(),
            "max_tokens": self.max_tokens(prompt),
            "system": chat.system,
            "messages": [{"role": "user", "content": chat.user}],
            **self.sampling(prompt, ""),  # the Messages API takes no seed
            "stop_sequences": list(plan.stop),
            "stream": True,
        }
        usage = Usage()
        async with self.request(
            "POST", self.endpoint(), json=self.with_options(body), observer=observer
        ) as response:
            self.report_plan(plan, observer)
            stopped = False
            async for event in iter_sse(response, self.name, self.deadline_check(deadline)):
                if stopped or event.event == "ping":
                    continue
                obj = parse_json(event.data, self.name)
                if not isinstance(obj, dict):
                    raise ProtocolError(self.name, f"backend '{self.name}' sent a non-object event")
                kind = obj.get("type", event.event)
                if kind == "error" or event.event == "error":
                    error = obj.get("error")
                    kind_name = error.get("type") if isinstance(error, dict) else None
                    status = EVENT_STATUS.get(str(kind_name), 500)
                    raise error_for_status(
                        self.name,
                        status,
                        {},
                        event.data.encode(),
                        url=self.endpoint(),
                        model=str(body["model"]),
                    )
                if kind == "content_block_delta":
                    delta = obj.get("delta") or {}
                    text = delta.get("text")
                    if delta.get("type") == "text_delta" and isinstance(text, str) and text:
                        yield text
                elif kind == "message_start":
                    start = (obj.get("message") or {}).get("usage") or {}
                    usage.prompt_tokens = start.get("input_tokens")
                elif kind == "message_delta":
                    usage.completion_tokens = (obj.get("usage") or {}).get("output_tokens")
                elif kind == "message_stop":
                    stopped = True
                    if observer is not None:
                        observer.on_usage(usage)
                self.check_deadline(deadline)
            if not stopped:
                raise cut_short(self.name, "message_stop")

    async def health(self) -> None:
        await self.probe(join_url(self.config.url, "/v1", "/models"))

"""Google Gemini ``:streamGenerateContent?alt=sse``: infill through a chat prompt.

The key goes in ``x-goog-api-key`` (never in the URL, so it cannot end up in a log). Text is
in ``candidates[0].content.parts[].text`` (parts marked ``thought`` are skipped); the last
chunk carries ``finishReason``. A 429 tells its cooldown in ``RetryInfo.retryDelay``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from anyfill.daemon.backends.base import Capabilities, FimPrompt, StreamObserver, Usage
from anyfill.daemon.backends.chat import chat_plan, chat_prompt
from anyfill.daemon.backends.common import HttpBackend, join_url
from anyfill.daemon.backends.wire import cut_short, error_for_status, iter_sse, parse_json
from anyfill.daemon.errors import BadRequest, ProtocolError

__all__ = ["GeminiBackend"]

DEFAULT_MODEL = "gemini-2.5-flash"
#: Gemini allows at most 5 stop sequences.
MAX_STOP = 5


class GeminiBackend(HttpBackend):
    type_name = "gemini"
    capabilities = Capabilities(chat_only=True)

    def auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.api_key} if self.api_key else {}

    def model_name(self) -> str:
        return (self.config.model or DEFAULT_MODEL).removeprefix("models/")

    def endpoint(self, method: str) -> str:
        return join_url(self.config.url, "/v1beta", f"/models/{self.model_name()}:{method}")

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        chat = chat_prompt(prompt)
        plan = chat_plan(prompt, self.config.stop)
        body: dict[str, Any] = {
            "systemInstruction": {"parts": [{"text": chat.system}]},
            "contents": [{"role": "user", "parts": [{"text": chat.user}]}],
            "generationConfig": {
                "maxOutputTokens": self.max_tokens(prompt),
                **self.sampling(prompt),
                "stopSequences": list(plan.stop[:MAX_STOP]),
            },
        }
        url = self.endpoint("streamGenerateContent")
        async with self.request(
            "POST", url, json=self.with_options(body), observer=observer, params={"alt": "sse"}
        ) as response:
            self.report_plan(plan, observer)
            finished = False
            async for event in iter_sse(response, self.name, self.deadline_check(deadline)):
                obj = parse_json(event.data, self.name)
                if not isinstance(obj, dict):
                    raise ProtocolError(self.name, f"backend '{self.name}' sent a non-object event")
                if "error" in obj:
                    error = obj.get("error")
                    code = error.get("code") if isinstance(error, dict) else None
                    status = code if type(code) is int and 400 <= code <= 599 else 500
                    raise error_for_status(
                        self.name, status, {}, event.data.encode(), url=url, model=self.model_name()
                    )
                blocked = (obj.get("promptFeedback") or {}).get("blockReason")
                if blocked:
                    raise BadRequest(
                        self.name, f"backend '{self.name}' blocked the prompt ({blocked})"
                    )
                candidates = obj.get("candidates") or []
                for candidate in candidates[:1]:
                    parts = (candidate.get("content") or {}).get("parts") or ()
                    for part in parts:
                        text = part.get("text")
                        if isinstance(text, str) and text and not part.get("thought"):
                            yield text
                    if candidate.get("finishReason"):
                        finished = True
                meta = obj.get("usageMetadata")
                if observer is not None and isinstance(meta, dict):
                    observer.on_usage(
                        Usage(meta.get("promptTokenCount"), meta.get("candidatesTokenCount"))
                    )
                self.check_deadline(deadline)
            if not finished:
                raise cut_short(self.name, "its last chunk")

    async def health(self) -> None:
        url = join_url(self.config.url, "/v1beta", f"/models/{self.model_name()}")
        await self.probe(url)

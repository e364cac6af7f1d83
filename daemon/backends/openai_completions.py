"""OpenAI-compatible ``/v1/completions``: vLLM, llama.cpp, TGI, LM Studio, Together,
Fireworks, OpenRouter, OpenAI instruct models, DeepSeek ``/beta``.

Most of these servers reject ``suffix`` (vLLM, llama.cpp, TGI, Together), so the prompt is
rendered client-side with the model's FIM template. Where the server takes ``suffix``
(OpenAI instruct, DeepSeek beta; ``options.native_suffix = true`` for others) it is sent
natively. In ``auto`` mode a 400 that names ``suffix`` switches to the template for good.
Stop lists are cut to the server's limit (OpenAI 4, DeepSeek 16; ``options.max_stop``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx

from anyfill.daemon.backends.base import (
    BatchResult,
    Capabilities,
    FimPrompt,
    Plan,
    StreamObserver,
    Usage,
)
from anyfill.daemon.backends.common import HttpBackend, batch_results, join_url, raw_prompt
from anyfill.daemon.backends.llamacpp import configured_template
from anyfill.daemon.backends.wire import (
    cut_short,
    iter_sse_batches,
    parse_json,
    stream_error_note,
)
from anyfill.daemon.errors import (
    BadRequest,
    ConfigError,
    ProtocolError,
    ServerError,
    UnsupportedFeature,
)
from anyfill.daemon.fim.templates import TEMPLATES, FimTemplate, detect_template

__all__ = [
    "OpenAICompletionsBackend",
    "chat_delta_text",
    "read_openai_stream",
    "stream_openai",
]

log = logging.getLogger("anyfill.backends")

NATIVE_SUFFIX_HOSTS = ("api.openai.com", "api.deepseek.com", "api.siliconflow.cn")
STOP_LIMITS = {"api.openai.com": 4, "api.deepseek.com": 16}
DEFAULT_STOP_LIMIT = 16


def chat_delta_text(choice: dict[str, Any]) -> str | None:
    """The text of one chat-chunk choice (``delta.content``), for ``read_openai_stream``."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        return content if isinstance(content, str) else None
    return None


async def read_openai_stream(
    backend: str,
    response: httpx.Response,
    text_of: Callable[[dict[str, Any]], str | None],
    observer: StreamObserver | None,
    check_deadline: Callable[[], None],
) -> AsyncIterator[str]:
    """Text from ``data: {json}`` events ending with ``data: [DONE]``.

    ``text_of`` picks the text out of one choice. The stream must end with ``[DONE]`` or
    at least a ``finish_reason``; a stream that just stops is a ProtocolError.
    """
    finished = False
    async for events in iter_sse_batches(response, backend, check_deadline):
        texts: list[str] = []
        for event in events:
            data = event.data
            if data == "[DONE]":
                finished = True
                continue
            if finished and not data.startswith("{"):
                continue
            obj = parse_json(data, backend)
            if not isinstance(obj, dict):
                raise ProtocolError(
                    backend, f"backend '{backend}' sent an event that is not an object"
                )
            if "error" in obj or obj.get("object") == "error":
                said = stream_error_note(data)
                raise said.into(
                    ServerError(backend, f"backend '{backend}' failed mid-answer{said.hidden}")
                )
            usage = obj.get("usage")
            if observer is not None and isinstance(usage, dict):
                observer.on_usage(Usage(usage.get("prompt_tokens"), usage.get("completion_tokens")))
            for choice in obj.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                text = text_of(choice)
                if text:
                    texts.append(text)
                if choice.get("finish_reason"):
                    finished = True
        if texts:
            # What one read brought goes up as one chunk: a hop per event costs more.
            yield "".join(texts)
        check_deadline()
    if not finished:
        raise cut_short(backend, "[DONE]")


async def stream_openai(
    backend: HttpBackend,
    url: str,
    body: dict[str, Any],
    plan: Plan,
    *,
    observer: StreamObserver | None,
    deadline: float,
    text_of: Callable[[dict[str, Any]], str | None],
) -> AsyncIterator[str]:
    """POST a streamed OpenAI-style request (completions, chat, Mistral FIM) and yield its
    text; the plan is reported once the server accepted the request."""
    async with backend.request(
        "POST", url, json=backend.with_options(body), observer=observer
    ) as response:
        backend.report_plan(plan, observer)
        async for chunk in read_openai_stream(
            backend.name, response, text_of, observer, backend.deadline_check(deadline)
        ):
            yield chunk


class OpenAICompletionsBackend(HttpBackend):
    type_name = "openai-completions"
    capabilities = Capabilities(native_suffix=True, raw_prompt=True, prompt_list=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._suffix_refused = False

    def endpoint(self) -> str:
        if self.host == "api.deepseek.com":  # DeepSeek serves FIM completions only in beta
            return join_url(self.config.url, "/beta", "/completions")
        return join_url(self.config.url, "/v1", "/completions")

    def native_suffix(self) -> bool:
        setting = self.config.options.get("native_suffix", "auto")
        if setting is True or setting is False:
            return setting
        if setting != "auto":
            raise ConfigError(
                f"backend '{self.name}': options.native_suffix must be true, false or \"auto\"",
                key="options.native_suffix",
            )
        return not self._suffix_refused and (
            self.host in NATIVE_SUFFIX_HOSTS or self.config.url.rstrip("/").endswith("/beta")
        )

    def max_stop(self) -> int | None:
        configured = super().max_stop()
        if configured is not None:
            return configured
        return STOP_LIMITS.get(self.host, DEFAULT_STOP_LIMIT)

    @functools.cached_property
    def _known_template(self) -> FimTemplate | None:
        """The configured template, else the model's (the config never changes: look once)."""
        return configured_template(self.name, self.config.template) or detect_template(
            self.config.model
        )

    def template(self) -> FimTemplate:
        found = self._known_template
        if found is None:
            raise ConfigError(
                f"backend '{self.name}': cannot tell the FIM template of model "
                f"'{self.config.model or '(none set)'}' and this server takes no suffix; set "
                f'template = "<family>" ({", ".join(TEMPLATES)}), or options.native_suffix = '
                "true if the server accepts a suffix",
                key="template",
            )
        return found

    def _body(
        self, prompt: FimPrompt, prompt_text: str | list[str], stops: Sequence[str]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": prompt_text,
            "max_tokens": self.max_tokens(prompt),
            **self.sampling(prompt),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.config.model:
            body["model"] = self.config.model
        wire_stops = self.stops(stops, prompt)
        if wire_stops:
            body["stop"] = wire_stops
        return body

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        if self.native_suffix():
            body = self._body(prompt, prompt.prefix, ())
            body["suffix"] = prompt.suffix
            plan = Plan(mode="native", stop=self.plan_stops((), prompt))
            auto = self.config.options.get("native_suffix", "auto") == "auto"
            started = False
            try:
                async for chunk in self._stream_text(body, plan, observer, deadline):
                    started = True
                    yield chunk
                return
            except BadRequest as exc:
                names_suffix = "suffix" in exc.server_message.lower()
                if started or not names_suffix:
                    raise
                if not auto:  # said in our words: the server's message may hold the prompt
                    raise BadRequest(
                        self.name,
                        f"backend '{self.name}' refused the 'suffix' field that "
                        'options.native_suffix = true sends: set it to "auto" or false',
                        status=exc.status,
                    ) from exc
                self._suffix_refused = True
                log.info("backend %s refused 'suffix': using a raw template prompt", self.name)
        template = self.template()
        text = raw_prompt(template, prompt)
        note = (
            "the server refused 'suffix': switched to a raw prompt" if self._suffix_refused else ""
        )
        plan = Plan(
            mode="template",
            template=template.name,
            stop=self.plan_stops(template.stop, prompt),
            note=note,
        )
        body = self._body(prompt, text, template.stop)
        async for chunk in self._stream_text(body, plan, observer, deadline):
            yield chunk

    def _stream_text(
        self, body: dict[str, Any], plan: Plan, observer: StreamObserver | None, deadline: float
    ) -> AsyncIterator[str]:
        return stream_openai(
            self,
            self.endpoint(),
            body,
            plan,
            observer=observer,
            deadline=deadline,
            text_of=lambda c: c.get("text"),
        )

    async def complete_batch(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        """One request with ``prompt`` as a list (templated); native-suffix servers take a
        single prompt per request, so those run one by one, concurrently."""
        if not prompts:
            return []
        if self.native_suffix():
            return await self.batch_one_by_one(prompts, observer)
        template = self.template()
        if observer is not None:
            observer.on_plan(Plan(mode="template", template=template.name, stop=template.stop))
        texts = [
            template.render(p.prefix, p.suffix, extra=p.extra, filename=p.filename) for p in prompts
        ]
        body = self._body(prompts[0], texts, template.stop)
        body["stream"] = False
        body.pop("stream_options")
        answer = await self.post_json(self.endpoint(), self.with_options(body), observer)
        if not isinstance(answer, dict):
            raise UnsupportedFeature(self.name, f"backend '{self.name}': odd batch answer")
        return batch_results(self.name, answer, len(prompts), observer)

    async def health(self) -> None:
        await self.probe(join_url(self.config.url, "/v1", "/models"))

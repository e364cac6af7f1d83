"""Ollama ``/api/generate``: native ``suffix`` where the model supports insert, else raw.

Whether a model can infill is what ``/api/show`` tells: the ``insert`` capability (newer
Ollama) or a template that mentions ``.Suffix``. The answer is cached per model. Models
without it get a raw prompt (``raw: true``) rendered with the configured or detected
template. The stream is NDJSON; Ollama may report a failure as an ``{"error": ...}`` line
after a 200.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from anyfill.daemon.backends.base import Capabilities, FimPrompt, Plan, StreamObserver, Usage
from anyfill.daemon.backends.common import HttpBackend, raw_prompt
from anyfill.daemon.backends.llamacpp import configured_template
from anyfill.daemon.backends.wire import ServerWords, cut_short, iter_ndjson, server_said
from anyfill.daemon.errors import ConfigError, ProtocolError, ServerError, UnsupportedFeature
from anyfill.daemon.fim.templates import (
    TEMPLATES,
    FimTemplate,
    detect_template,
    template_from_tokens,
)

__all__ = ["OllamaBackend"]

log = logging.getLogger("anyfill.backends")

#: Keep the model loaded between hotkey presses (Ollama's default unloads after 5 min).
DEFAULT_KEEP_ALIVE = "30m"

_TOKEN = re.compile(r"<[^<>\s]{1,40}>|\[[A-Z]{3,10}\]")


@dataclass(frozen=True)
class _ModelInfo:
    insert: bool
    template_text: str


class OllamaBackend(HttpBackend):
    type_name = "ollama"
    capabilities = Capabilities(native_suffix=True, raw_prompt=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._models: dict[str, _ModelInfo] = {}
        self._lock = asyncio.Lock()

    def url(self, path: str) -> str:
        return f"{self.config.url}{path}"

    def model(self) -> str:
        if not self.config.model:
            raise ConfigError(
                f"backend '{self.name}' (ollama) needs a model name, e.g. "
                'model = "qwen2.5-coder:1.5b-base"',
                key="model",
            )
        return self.config.model

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        model = self.model()
        explicit = configured_template(self.name, self.config.template)
        if explicit is None and (await self._info(model)).insert:
            plan = Plan(mode="native", stop=self.plan_stops((), prompt))
            body: dict[str, Any] = {
                "model": model,
                "prompt": prompt.prefix,
                "suffix": prompt.suffix,
                "options": self._options(prompt, ()),
            }
        else:
            template, note = await self._raw_template(model, explicit)
            plan = Plan(
                mode="template",
                template=template.name,
                stop=self.plan_stops(template.stop, prompt),
                note=note,
            )
            body = {
                "model": model,
                "prompt": raw_prompt(template, prompt),
                "raw": True,
                "options": self._options(prompt, template.stop),
            }
        body.update(stream=True, keep_alive=DEFAULT_KEEP_ALIVE)
        body = self.with_options(body)
        async with self.request(
            "POST", self.url("/api/generate"), json=body, observer=observer
        ) as response:
            self.report_plan(plan, observer)
            done = False
            async for obj in iter_ndjson(response, self.name, self.deadline_check(deadline)):
                if done:  # drain to the end so the connection goes back to the pool
                    continue
                if "error" in obj:
                    said = server_said(ServerWords(str(obj["error"]), ""))
                    raise said.into(
                        ServerError(
                            self.name, f"backend '{self.name}' failed mid-answer{said.hidden}"
                        )
                    )
                text = obj.get("response")
                if isinstance(text, str) and text:
                    yield text
                if obj.get("done"):
                    if observer is not None:
                        observer.on_usage(
                            Usage(obj.get("prompt_eval_count"), obj.get("eval_count"))
                        )
                    done = True
                    continue
                self.check_deadline(deadline)
            if not done:
                raise cut_short(self.name, "its last line")

    def _options(self, prompt: FimPrompt, template_stops: tuple[str, ...]) -> dict[str, Any]:
        options: dict[str, Any] = {
            "num_predict": self.max_tokens(prompt),
            **self.sampling(prompt),
        }
        stops = self.stops(template_stops, prompt)
        if stops:
            options["stop"] = stops
        return options

    async def _info(self, model: str) -> _ModelInfo:
        async with self._lock:
            if model not in self._models:
                shown = await self.post_json(self.url("/api/show"), {"model": model})
                if not isinstance(shown, dict):
                    raise ProtocolError(self.name, f"backend '{self.name}': odd /api/show answer")
                template = str(shown.get("template") or "")
                capabilities = shown.get("capabilities")
                if isinstance(capabilities, list):
                    insert = "insert" in capabilities
                else:  # Ollama before capabilities: the template tells
                    insert = ".Suffix" in template
                self._models[model] = _ModelInfo(insert=insert, template_text=template)
                log.info(
                    "backend %s: model %s can%s insert", self.name, model, "" if insert else "not"
                )
            return self._models[model]

    async def _raw_template(
        self, model: str, explicit: FimTemplate | None
    ) -> tuple[FimTemplate, str]:
        if explicit is not None:
            return explicit, ""
        why = f"model '{model}' has no insert support in Ollama (its template lacks .Suffix)"
        by_name = detect_template(model)
        if by_name is not None:
            return by_name, f"{why}: sent a raw '{by_name.name}' prompt (from the model name)"
        info = await self._info(model)
        by_tokens = template_from_tokens(_TOKEN.findall(info.template_text))
        if by_tokens is not None:
            return by_tokens, f"{why}: sent a raw '{by_tokens.name}' prompt (from its template)"
        raise UnsupportedFeature(
            self.name,
            f"backend '{self.name}': {why} and no FIM template fits it; use a base/code model "
            f'(e.g. qwen2.5-coder:1.5b-base) or set template = "<family>" '
            f"({', '.join(TEMPLATES)})",
        )

    async def health(self) -> None:
        await self._info(self.model())

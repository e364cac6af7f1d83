"""llama.cpp ``llama-server``: native ``/infill``, raw ``/completion`` with a template.

``/infill`` builds the FIM prompt from the model's own FIM tokens. A model without them
answers 501; then this backend finds a template (the config's, else from the model's file
name in ``/props``, else by asking ``/tokenize`` which FIM tokens exist), sends a raw prompt
to ``/completion`` and says so in the Plan's note. With ``template`` set in the config it
goes to ``/completion`` directly. Batches go to ``/v1/completions`` as a prompt list.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
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
from anyfill.daemon.backends.common import (
    HttpBackend,
    batch_results,
    parse_json_bytes,
    raw_prompt,
    read_body,
)
from anyfill.daemon.backends.wire import cut_short, iter_sse, parse_json, stream_error_note
from anyfill.daemon.errors import (
    BadRequest,
    ConfigError,
    ModelNotFound,
    ProtocolError,
    ServerError,
    UnsupportedFeature,
)
from anyfill.daemon.fim.templates import (
    TEMPLATES,
    FimTemplate,
    detect_template,
    get_template,
    template_from_tokens,
)

__all__ = ["LlamaCppBackend", "configured_template"]

log = logging.getLogger("anyfill.backends")

#: Stop generating this long after the first token once a newline was produced (llama.vim).
DEFAULT_T_MAX_PREDICT_MS = 1000

#: Token spellings probed with /tokenize when the model's name does not tell its family:
#: every family's FIM prefix token plus the end tokens that tell look-alike families apart.
PROBE_TOKENS = (
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<\uff5cfim\u2581begin\uff5c>",
    "<PRE>",
    "<|code_prefix|>",
    "[PREFIX]",
    "<[fim-prefix]>",
    "<|file_separator|>",
    "<end_of_turn>",
    "<|end_of_text|>",
    "<|endoftext|>",
)


def configured_template(backend: str, name: str) -> FimTemplate | None:
    """The template a config names; None for ``auto``; a ConfigError for an unknown name."""
    if not name or name == "auto":
        return None
    try:
        return get_template(name)
    except ValueError as exc:
        raise ConfigError(f"backend '{backend}': {exc}", key="template") from exc


class LlamaCppBackend(HttpBackend):
    type_name = "llamacpp"
    capabilities = Capabilities(native_suffix=True, raw_prompt=True, prompt_list=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._infill: bool | None = None
        """None: not tried yet; False: /infill answered 501 for this server's model."""
        self._detected: dict[str, tuple[FimTemplate, str] | str] = {}
        """Per configured model: the template found for raw prompts and why, or the message
        saying none fits. A miss is remembered too: a ``--jsonl`` run asks for a template
        once per small batch, and probing ``/props`` and ``/tokenize`` again each time made
        it about 15 times slower per line than single requests."""
        self._lock = asyncio.Lock()

    def url(self, path: str) -> str:
        return f"{self.config.url}{path}"

    # -- single prompts ------------------------------------------------------------------

    async def stream(
        self, prompt: FimPrompt, observer: StreamObserver | None = None
    ) -> AsyncIterator[str]:
        deadline = self.deadline()
        explicit = configured_template(self.name, self.config.template)
        if explicit is None and self._infill is not False:
            started = False
            try:
                async with self.request(
                    "POST", self.url("/infill"), json=self._infill_body(prompt), observer=observer
                ) as response:
                    self._infill = True
                    started = True
                    plan = Plan(mode="native", stop=self.plan_stops((), prompt))
                    self.report_plan(plan, observer)
                    async for chunk in self._read(response, deadline, observer):
                        yield chunk
                return
            except UnsupportedFeature:
                if started:
                    raise
                self._infill = False
        template, why = await self._raw_template(explicit)
        plan = Plan(
            mode="template",
            template=template.name,
            stop=self.plan_stops(template.stop, prompt),
            note=why,
        )
        body = self._completion_body(prompt, template)
        async with self.request(
            "POST", self.url("/completion"), json=body, observer=observer
        ) as response:
            self.report_plan(plan, observer)
            async for chunk in self._read(response, deadline, observer):
                yield chunk

    def _common(self, prompt: FimPrompt) -> dict[str, Any]:
        return {
            "n_predict": self.max_tokens(prompt),
            **self.sampling(prompt),
            "cache_prompt": True,
            "t_max_predict_ms": DEFAULT_T_MAX_PREDICT_MS,
            "stream": True,
        }

    def _infill_body(self, prompt: FimPrompt) -> dict[str, Any]:
        body = {
            "input_prefix": prompt.prefix,
            "input_suffix": prompt.suffix,
            "input_extra": [{"filename": name, "text": text} for name, text in prompt.extra],
            **self._common(prompt),
            "stop": self.stops((), prompt),
        }
        return self.with_options(body)

    def _completion_body(self, prompt: FimPrompt, template: FimTemplate) -> dict[str, Any]:
        text = raw_prompt(template, prompt)
        body = {"prompt": text, **self._common(prompt), "stop": self.stops(template.stop, prompt)}
        return self.with_options(body)

    async def _read(
        self, response: httpx.Response, deadline: float, observer: StreamObserver | None
    ) -> AsyncIterator[str]:
        done = False
        async for event in iter_sse(response, self.name, self.deadline_check(deadline)):
            if done:  # drain to the end so the connection goes back to the pool
                continue
            if event.event == "error":
                said = stream_error_note(event.data)
                raise said.into(
                    ServerError(self.name, f"backend '{self.name}' failed mid-answer{said.hidden}")
                )
            obj = parse_json(event.data, self.name)
            if not isinstance(obj, dict):
                raise ProtocolError(
                    self.name, f"backend '{self.name}' sent an event that is not an object"
                )
            if "error" in obj:
                said = stream_error_note(event.data)
                raise said.into(
                    ServerError(self.name, f"backend '{self.name}' failed mid-answer{said.hidden}")
                )
            content = obj.get("content")
            if isinstance(content, str) and content:
                yield content
            if obj.get("stop"):
                if observer is not None:
                    observer.on_usage(
                        Usage(obj.get("tokens_evaluated"), obj.get("tokens_predicted"))
                    )
                done = True
                continue
            self.check_deadline(deadline)
        if not done:
            raise cut_short(self.name, "its final event")

    # -- finding a template ----------------------------------------------------------------

    async def _raw_template(self, explicit: FimTemplate | None) -> tuple[FimTemplate, str]:
        """The template for raw prompts and the note saying why it was chosen."""
        if explicit is not None:
            return explicit, ""
        model = self.config.model
        async with self._lock:
            if model not in self._detected:
                try:
                    self._detected[model] = await self._detect()
                except UnsupportedFeature as exc:
                    self._detected[model] = str(exc)
                found = self._detected[model]
                log.info("backend %s: %s", self.name, found if isinstance(found, str) else found[1])
        found = self._detected[model]
        if isinstance(found, str):
            raise UnsupportedFeature(self.name, found, status=501)
        return found

    async def _detect(self) -> tuple[FimTemplate, str]:
        model = await self._model_name()
        why = (
            f"/infill answered 501 (model '{model}' has no FIM tokens)"
            if self._infill is False
            else f"model '{model}'"
        )
        by_name = detect_template(self.config.model or model)
        if by_name is not None:
            return by_name, f"{why}: sent a raw '{by_name.name}' prompt (from the model name)"
        by_tokens = template_from_tokens(await self._special_tokens())
        if by_tokens is not None:
            return by_tokens, f"{why}: sent a raw '{by_tokens.name}' prompt (from its tokens)"
        known = ", ".join(TEMPLATES)
        raise UnsupportedFeature(
            self.name,
            f"backend '{self.name}': {why} and no FIM template fits it; set template = "
            f'"<family>" for this backend ({known}) or load a FIM model such as a '
            "Qwen2.5-Coder base GGUF",
            status=501,
        )

    async def _model_name(self) -> str:
        url = self.url("/props")
        async with self.request("GET", url) as response:
            props = parse_json_bytes(await read_body(response, self.name, url), self.name)
        if not isinstance(props, dict):
            raise ProtocolError(self.name, f"backend '{self.name}': /props is not a JSON object")
        path = str(props.get("model_path") or props.get("model_alias") or "")
        return path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".gguf")

    async def _special_tokens(self) -> list[str]:
        """Which probe spellings the vocabulary holds as single tokens."""

        async def single(spelling: str) -> bool:
            body = {"content": spelling, "add_special": False, "parse_special": True}
            try:
                answer = await self.post_json(self.url("/tokenize"), body)
            except (BadRequest, ModelNotFound, UnsupportedFeature):
                return False
            tokens = answer.get("tokens") if isinstance(answer, dict) else None
            return isinstance(tokens, list) and len(tokens) == 1

        found = await asyncio.gather(*(single(s) for s in PROBE_TOKENS))
        return [s for s, ok in zip(PROBE_TOKENS, found, strict=True) if ok]

    # -- batches and health ------------------------------------------------------------------

    async def complete_batch(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        """All prompts in one ``/v1/completions`` request (a prompt list, templated)."""
        if not prompts:
            return []
        explicit = configured_template(self.name, self.config.template)
        try:
            template, why = await self._raw_template(explicit)
        except UnsupportedFeature:
            if self._infill is False:
                raise
            # No template for a prompt list, but /infill may still work: one by one.
            return await self.batch_one_by_one(prompts, observer)
        if observer is not None:
            observer.on_plan(
                Plan(mode="template", template=template.name, stop=template.stop, note=why)
            )
        first = prompts[0]
        body = self.with_options(
            {
                "prompt": [
                    template.render(p.prefix, p.suffix, extra=p.extra, filename=p.filename)
                    for p in prompts
                ],
                "max_tokens": self.max_tokens(first),
                **self.sampling(first),
                "stop": self.stops(template.stop, first),
                "cache_prompt": True,
                "stream": False,
            }
        )
        if self.config.model:
            body["model"] = self.config.model
        answer = await self.post_json(self.url("/v1/completions"), body, observer)
        return batch_results(self.name, answer, len(prompts), observer)

    async def health(self) -> None:
        await self.probe(self.url("/health"))

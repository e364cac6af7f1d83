"""Ollama ``/api/generate`` (NDJSON stream), ``/api/show``, ``/api/version``.

Each streamed line is one JSON object with ``response``; the last has ``"done": true``,
``done_reason`` and the counts. Errors are ``{"error": "..."}``, also as an extra line
inside a 200 stream. A model whose template mentions ``.Suffix`` has the ``insert``
capability; a ``suffix`` sent to any other model is a 400 ``... does not support insert``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.servers.http import RecordedRequest, Response
from tests.servers.script import Reply, Scripted, stream_pieces

#: The Qwen2.5-Coder base template as Ollama ships it (mentions .Suffix: FIM capable).
FIM_TEMPLATE = (
    "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>"
    "{{- else }}{{ .Prompt }}{{- end }}"
)
#: A chat-only template (no .Suffix).
CHAT_TEMPLATE = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)

DEFAULT_MODELS = {
    "qwen2.5-coder:1.5b-base": FIM_TEMPLATE,
    "starcoder2:3b": "{{ .Prompt }}",
    "llama3.2:latest": CHAT_TEMPLATE,
}

ERROR_MESSAGES = {
    "auth": "unauthorized",
    "forbidden": "forbidden",
    "rate_limit": "too many requests",
    "not_found": "model '{model}' not found",
    "bad_request": "invalid request",
    "server": "llama runner process has terminated: exit status 2",
    "unsupported": "not supported",
    "unavailable": "server busy, please try again.  maximum pending requests exceeded",
    "overloaded": "server busy, please try again.  maximum pending requests exceeded",
    "canceled": "request canceled",
}

CREATED_AT = "2026-11-30T06:00:00.000000000Z"


def _details(template: str) -> dict[str, Any]:
    capabilities = ["completion", "insert"] if ".Suffix" in template else ["completion"]
    return {
        "modelfile": f'FROM /models/blob\nTEMPLATE """{template}"""\n',
        "parameters": 'stop "<|endoftext|>"',
        "template": template,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "qwen2",
            "families": ["qwen2"],
            "parameter_size": "1.5B",
            "quantization_level": "Q4_K_M",
        },
        "model_info": {"general.architecture": "qwen2"},
        "capabilities": capabilities,
        "modified_at": CREATED_AT,
    }


class Ollama(Scripted):
    """A scripted Ollama server.

    ``models`` maps model name -> template; a name without a tag also matches
    ``name:latest``. ``capabilities=False`` leaves ``capabilities`` out of ``/api/show``
    (older Ollama), so only the template tells.
    """

    routes = (
        ("POST", r"/api/generate"),
        ("POST", r"/api/show"),
        ("GET", r"/api/version"),
        ("GET", r"/"),
    )

    def __init__(
        self,
        *replies: Reply,
        default: Reply | None = None,
        models: dict[str, str] | None = None,
        capabilities: bool = True,
    ) -> None:
        super().__init__(*replies, default=default)
        self.models = dict(DEFAULT_MODELS if models is None else models)
        self.capabilities = capabilities

    def _template(self, model: str) -> str | None:
        if model in self.models:
            return self.models[model]
        if ":" not in model:
            return self.models.get(f"{model}:latest")
        return None

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        if request.path == "/":
            await response.body(200, "Ollama is running", {"Content-Type": "text/plain"})
            return
        if request.path == "/api/version":
            await response.json(200, {"version": "0.13.0"})
            return
        body = request.json() or {}
        model = str(body.get("model", ""))
        template = self._template(model)
        if template is None:
            await response.json(404, {"error": f"model '{model}' not found"})
            return
        if request.path == "/api/show":
            shown = _details(template)
            if not self.capabilities:
                del shown["capabilities"]
            await response.json(200, shown)
            return
        if body.get("suffix") and ".Suffix" not in template:
            await response.json(
                400, {"error": f"registry.ollama.ai/library/{model} does not support insert"}
            )
            return
        if body.get("raw") and (body.get("template") or body.get("system") or body.get("context")):
            await response.json(
                400, {"error": "raw mode does not support template, system, or context"}
            )
            return
        reply = self.next_reply()
        await response.sleep(reply.delay_s)
        if reply.error is not None:
            message = reply.message or ERROR_MESSAGES[reply.error].format(model=model)
            await response.json(reply.error_status(), {"error": message}, reply.error_headers())
            return
        pieces = reply.pieces()
        final = {
            "model": model,
            "created_at": CREATED_AT,
            "response": "",
            "done": True,
            "done_reason": "stop" if reply.finish_reason == "stop" else "length",
            "context": [1, 2, 3],
            "total_duration": 5_043_500_667,
            "load_duration": 5_025_959,
            "prompt_eval_count": reply.prompt_tokens,
            "prompt_eval_duration": 325_953_000,
            "eval_count": len(pieces),
            "eval_duration": 4_709_213_000,
        }
        if body.get("stream", True) is False:
            await response.json(200, {**final, "response": reply.text}, reply.headers)
            return
        await response.start(200, {"Content-Type": "application/x-ndjson", **reply.headers})

        def render(_index: int, piece: str) -> bytes:
            line = {"model": model, "created_at": CREATED_AT, "response": piece, "done": False}
            return (json.dumps(line, ensure_ascii=False) + "\n").encode()

        ok = await stream_pieces(
            response, reply, pieces, render, garbage=b"{not json\n", keepalive=b"\n"
        )
        if not ok:
            return
        if reply.midstream_error:
            await response.write((json.dumps({"error": reply.midstream_error}) + "\n").encode())
            await response.end()
            return
        await response.write((json.dumps(final) + "\n").encode())
        await response.end()

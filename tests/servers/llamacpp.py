"""llama.cpp ``llama-server``: ``/infill``, ``/completion``, ``/props``, ``/health`` and its
OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``.

Native streams are ``data: {json}`` SSE events with ``content`` and a final object with
``"stop": true``; errors are ``{"error": {"code", "message", "type"}}``. With ``fim=False``
the model has no FIM tokens and ``/infill`` answers 501 ``not_supported_error``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.servers.http import RecordedRequest, Response
from tests.servers.openai import OpenAI
from tests.servers.script import Reply, Scripted, sse, stream_pieces

ERROR_TYPES = {
    "auth": ("authentication_error", "Invalid API Key"),
    "forbidden": ("permission_error", "Forbidden"),
    "rate_limit": ("unavailable_error", "Too many requests"),
    "not_found": ("not_found_error", "File Not Found"),
    "bad_request": ("invalid_request_error", "Invalid request"),
    "server": ("server_error", "Internal server error"),
    "unsupported": ("not_supported_error", "This server does not support it"),
    "unavailable": ("unavailable_error", "Loading model"),
    "overloaded": ("unavailable_error", "Server busy"),
    "canceled": ("server_error", "Request cancelled"),
}

STARCODER_VOCAB = ("<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>")
CHATML_VOCAB = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

INFILL_501 = (
    "Infill is not supported by this model: prefix token is missing. "
    "suffix token is missing. middle token is missing."
)


def llama_error(status: int, kind: str, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": kind}}


class LlamaCpp(Scripted):
    """A scripted ``llama-server``.

    ``fim``: the model has FIM tokens (else ``/infill`` answers 501).
    ``model_path``: what ``/props`` reports (template detection reads it).
    ``api_key``: when set, requests need ``Authorization: Bearer KEY`` (``--api-key``).
    ``loading``: ``/health`` and every endpoint answer 503 "Loading model".
    ``vocab``: the special tokens ``/tokenize`` turns into one token (default: StarCoder's
    FIM tokens when ``fim``, else ChatML's); anything else is one token per character.
    """

    routes = (
        ("POST", r"/infill"),
        ("POST", r"/completion"),
        ("POST", r"/completions"),
        ("POST", r"/v1/completions"),
        ("POST", r"/v1/chat/completions"),
        ("GET", r"/props"),
        ("POST", r"/tokenize"),
        ("GET", r"/health"),
    )

    def __init__(
        self,
        *replies: Reply,
        default: Reply | None = None,
        fim: bool = True,
        model_path: str = "/models/tiny-fim.gguf",
        api_key: str | None = None,
        loading: bool = False,
        n_ctx: int = 2048,
        vocab: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(*replies, default=default)
        self.fim = fim
        self.model_path = model_path
        self.api_key = api_key
        self.loading = loading
        self.n_ctx = n_ctx
        #: Special tokens ``/tokenize`` knows as one token (StarCoder's FIM set by default).
        self.vocab = vocab if vocab is not None else (STARCODER_VOCAB if fim else CHATML_VOCAB)
        # The OpenAI-compatible routes share this reply queue.
        self.openai = OpenAI(reject_suffix="Unsupported param: suffix", model=model_path)
        self.openai.queue = self.queue
        self.openai.default = self.default

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        self.openai.default = self.default
        if self.loading:
            await response.json(503, llama_error(503, "unavailable_error", "Loading model"))
            return
        if request.path == "/health":
            await response.json(200, {"status": "ok"})
            return
        if self.api_key is not None and request.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            await response.json(401, llama_error(401, "authentication_error", "Invalid API Key"))
            return
        if request.path == "/props":
            await response.json(200, self.props())
            return
        if request.path == "/tokenize":
            content = str((request.json() or {}).get("content", ""))
            tokens = (
                [self.vocab.index(content) + 49000]
                if content in self.vocab
                else [ord(ch) for ch in content]
            )
            await response.json(200, {"tokens": tokens})
            return
        if request.path.startswith("/v1/"):
            await self.openai(request, response)
            return
        body = request.json() or {}
        if request.path == "/infill":
            if not self.fim:
                # Measured on llama-server: this 501 comes with "Connection: close".
                response.keep_alive = False
                await response.json(501, llama_error(501, "not_supported_error", INFILL_501))
                return
            if "input_prefix" not in body or "input_suffix" not in body:
                message = '"input_prefix" and "input_suffix" are required'
                await response.json(400, llama_error(400, "invalid_request_error", message))
                return
        elif "prompt" not in body:
            message = '"prompt" must be provided'
            await response.json(400, llama_error(400, "invalid_request_error", message))
            return
        reply = self.next_reply()
        await response.sleep(reply.delay_s)
        if reply.error is not None:
            kind, message = ERROR_TYPES[reply.error]
            status = reply.error_status()
            await response.json(
                status,
                llama_error(status, kind, reply.message or message),
                reply.error_headers(),
            )
            return
        await self._answer(body, reply, response)

    def props(self) -> dict[str, Any]:
        return {
            "default_generation_settings": {"n_ctx": self.n_ctx, "params": {"n_predict": -1}},
            "total_slots": 2,
            "model_path": self.model_path,
            "chat_template": "{{ messages }}",
            "modalities": {"vision": False, "audio": False},
            "build_info": "b0000-loopback",
        }

    async def _answer(self, body: dict[str, Any], reply: Reply, response: Response) -> None:
        pieces = reply.pieces()
        model = self.model_path.rsplit("/", 1)[-1]
        final = {
            "index": 0,
            "content": "",
            "tokens": [],
            "id_slot": 0,
            "stop": True,
            "model": model,
            "tokens_predicted": len(pieces),
            "tokens_evaluated": reply.prompt_tokens,
            "generation_settings": {"n_predict": body.get("n_predict", -1)},
            "prompt": "",
            "has_new_line": any("\n" in p for p in pieces),
            "truncated": False,
            "stop_type": "eos" if reply.finish_reason == "stop" else "limit",
            "stopping_word": "",
            "tokens_cached": reply.prompt_tokens + len(pieces),
            "timings": {
                "prompt_n": reply.prompt_tokens,
                "prompt_ms": 1.5,
                "predicted_n": len(pieces),
                "predicted_ms": 2.5,
            },
        }
        if not body.get("stream"):
            await response.json(200, {**final, "content": reply.text}, reply.headers)
            return
        headers = {"Content-Type": "text/event-stream", **reply.headers}
        await response.start(200, headers)

        def render(index: int, piece: str) -> bytes:
            return sse(
                {
                    "index": 0,
                    "content": piece,
                    "tokens": [],
                    "stop": False,
                    "id_slot": -1,
                    "tokens_predicted": index + 1,
                    "tokens_evaluated": reply.prompt_tokens,
                }
            )

        ok = await stream_pieces(
            response, reply, pieces, render, garbage=b"data: {not json\n\n", keepalive=b"\n"
        )
        if not ok:
            return
        if reply.midstream_error:
            error = llama_error(500, "server_error", reply.midstream_error)
            await response.write(f"error: {json.dumps(error)}\n\n".encode())
            await response.end()
            return
        await response.write(sse(final))
        await response.end()

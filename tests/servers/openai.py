"""OpenAI-style ``/v1/completions`` and ``/v1/chat/completions`` (also DeepSeek ``/beta``).

Streams ``data: {json}`` SSE events ending with ``data: [DONE]``; completions carry the
text in ``choices[i].text``, chat chunks in ``choices[0].delta.content``. Errors use
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from typing import Any

from tests.servers.http import RecordedRequest, Response
from tests.servers.script import KeyedScripted, Reply, now, sse, stream_pieces

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

ERROR_TYPES = {
    "auth": ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-***."),
    "forbidden": ("permission_error", None, "You are not allowed to use this model."),
    "rate_limit": (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again in 2s.",
    ),
    "not_found": (
        "invalid_request_error",
        "model_not_found",
        "The model `{model}` does not exist or you do not have access to it.",
    ),
    "bad_request": ("invalid_request_error", None, "Invalid request."),
    "server": ("server_error", None, "The server had an error while processing your request."),
    "unavailable": ("server_error", None, "The engine is currently overloaded."),
    "unsupported": ("invalid_request_error", None, "Unsupported parameter."),
    "overloaded": ("server_error", None, "Overloaded."),
    "canceled": ("server_error", None, "Request canceled."),
}


def openai_error(reply: Reply, model: str = "") -> dict[str, Any]:
    assert reply.error is not None
    kind, code, message = ERROR_TYPES[reply.error]
    return {
        "error": {
            "message": reply.message or message.format(model=model),
            "type": kind,
            "param": "model" if reply.error == "not_found" else None,
            "code": code,
        }
    }


class OpenAI(KeyedScripted):
    """``POST /v1/completions``, ``/beta/completions``, ``/v1/chat/completions``.

    ``api_key``: when set, a missing or wrong ``Authorization: Bearer`` gets a 401.
    ``reject_suffix``: answer a non-null ``suffix`` with this 400 message (vLLM says
    ``"suffix is not currently supported"``, llama.cpp ``"Unsupported param: suffix"``).
    ``max_stop``: reject longer stop lists with a 400 (OpenAI allows 4, DeepSeek 16).
    """

    routes = (
        ("POST", r"/v1/completions"),
        ("POST", r"/beta/completions"),
        ("POST", r"/completions"),
        ("POST", r"/v1/chat/completions"),
        ("POST", r"/chat/completions"),
        ("GET", r"/v1/models"),
    )

    def __init__(
        self,
        *replies: Reply,
        default: Reply | None = None,
        api_key: str | None = None,
        reject_suffix: str | None = None,
        max_stop: int | None = None,
        model: str = "test-model",
    ) -> None:
        super().__init__(*replies, default=default, api_key=api_key)
        self.reject_suffix = reject_suffix
        self.max_stop = max_stop
        self.model = model

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        body = request.json() or {}
        if self.api_key is not None and request.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            await response.json(401, openai_error(Reply(error="auth")))
            return
        if request.method == "GET":
            model = {"id": self.model, "object": "model", "created": now(), "owned_by": "test"}
            await response.json(200, {"object": "list", "data": [model]})
            return
        reply = self.next_reply()
        await response.sleep(reply.delay_s)
        model = body.get("model") or self.model
        if reply.error is not None:
            await response.json(
                reply.error_status(), openai_error(reply, model), reply.error_headers()
            )
            return
        if self.reject_suffix is not None and body.get("suffix") is not None:
            await response.json(
                400, openai_error(Reply(error="bad_request", message=self.reject_suffix))
            )
            return
        stop = body.get("stop")
        if self.max_stop is not None and isinstance(stop, list) and len(stop) > self.max_stop:
            message = f"'stop' has more than {self.max_stop} items"
            await response.json(400, openai_error(Reply(error="bad_request", message=message)))
            return
        if request.path.endswith("chat/completions"):
            await self._chat(body, reply, response, model)
        else:
            await self._completions(body, reply, response, model)

    async def _completions(
        self, body: dict[str, Any], reply: Reply, response: Response, model: str
    ) -> None:
        prompts = body.get("prompt", "")
        prompt_list = prompts if isinstance(prompts, list) else [prompts]
        texts = list(reply.batch) if reply.batch is not None else [reply.text] * len(prompt_list)
        ident = "cmpl-loopback"
        if not body.get("stream"):
            choices = [
                {"text": text, "index": i, "logprobs": None, "finish_reason": reply.finish_reason}
                for i, text in enumerate(texts)
            ]
            completion_tokens = sum(len(reply.pieces()) for _ in texts)
            await response.json(
                200,
                {
                    "id": ident,
                    "object": "text_completion",
                    "created": now(),
                    "model": model,
                    "choices": choices,
                    "usage": _usage(reply.prompt_tokens * len(texts), completion_tokens),
                },
                reply.headers,
            )
            return
        await response.start(200, {**SSE_HEADERS, **reply.headers})

        def render(index: int, piece: str) -> bytes:
            return sse(
                {
                    "id": ident,
                    "object": "text_completion",
                    "created": now(),
                    "choices": [
                        {"text": piece, "index": 0, "logprobs": None, "finish_reason": None}
                    ],
                    "model": model,
                }
            )

        pieces = reply.pieces()
        ok = await stream_pieces(
            response, reply, pieces, render, garbage=b"data: {not json\n\n", keepalive=KEEPALIVE
        )
        if not ok:
            return
        if reply.midstream_error:
            await response.write(sse({"error": {"message": reply.midstream_error}}))
            await response.end()
            return
        final: dict[str, Any] = {
            "id": ident,
            "object": "text_completion",
            "created": now(),
            "choices": [
                {"text": "", "index": 0, "logprobs": None, "finish_reason": reply.finish_reason}
            ],
            "model": model,
        }
        await response.write(sse(final))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk = {
                "id": ident,
                "object": "text_completion",
                "created": now(),
                "choices": [],
                "model": model,
                "usage": _usage(reply.prompt_tokens, len(pieces)),
            }
            await response.write(sse(usage_chunk))
        await response.write(b"data: [DONE]\n\n")
        await response.end()

    async def _chat(
        self, body: dict[str, Any], reply: Reply, response: Response, model: str
    ) -> None:
        ident = "chatcmpl-loopback"
        pieces = reply.pieces()
        if not body.get("stream"):
            await response.json(
                200,
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": now(),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply.text},
                            "logprobs": None,
                            "finish_reason": reply.finish_reason,
                        }
                    ],
                    "usage": _usage(reply.prompt_tokens, len(pieces)),
                },
                reply.headers,
            )
            return
        await response.start(200, {**SSE_HEADERS, **reply.headers})

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": now(),
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }

        await response.write(sse(chunk({"role": "assistant", "content": ""}, None)))
        ok = await stream_pieces(
            response,
            reply,
            pieces,
            lambda _i, piece: sse(chunk({"content": piece}, None)),
            garbage=b"data: {not json\n\n",
            keepalive=KEEPALIVE,
        )
        if not ok:
            return
        if reply.midstream_error:
            await response.write(sse({"error": {"message": reply.midstream_error}}))
            await response.end()
            return
        await response.write(sse(chunk({}, reply.finish_reason)))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**chunk({}, None), "choices": []}
            usage["usage"] = _usage(reply.prompt_tokens, len(pieces))
            await response.write(sse(usage))
        await response.write(b"data: [DONE]\n\n")
        await response.end()


KEEPALIVE = b": keep-alive\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }

"""Mistral ``POST /v1/fim/completions`` (Codestral).

Streams data-only SSE in the chat-chunk shape (``choices[0].delta.content``) ending with
``data: [DONE]``. A refused key is ``{"message": "Unauthorized", "request_id": ...}``;
other errors ``{"object": "error", "message", "type", "param", "code"}``.
"""

from __future__ import annotations

from typing import Any

from tests.servers.http import RecordedRequest, Response
from tests.servers.script import KeyedScripted, Reply, now, sse, stream_pieces

REQUEST_ID = "0123456789abcdef0123456789abcdef"

ERRORS = {
    "forbidden": ("invalid_request_error", "Forbidden"),
    "rate_limit": ("rate_limited", "Requests rate limit exceeded"),
    "not_found": ("invalid_request_error", "Invalid model: {model}"),
    "bad_request": ("invalid_request_error", "Invalid request"),
    "server": ("internal_server_error", "Internal server error"),
    "unsupported": ("invalid_request_error", "Not supported"),
    "unavailable": ("service_unavailable", "Service unavailable"),
    "overloaded": ("service_unavailable", "Service overloaded"),
    "canceled": ("internal_server_error", "Canceled"),
}


def mistral_error(reply: Reply, model: str) -> dict[str, Any]:
    assert reply.error is not None
    if reply.error == "auth":
        return {"message": reply.message or "Unauthorized", "request_id": REQUEST_ID}
    kind, message = ERRORS[reply.error]
    return {
        "object": "error",
        "message": reply.message or message.format(model=model),
        "type": kind,
        "param": None,
        "code": "1500" if reply.error == "not_found" else None,
    }


class MistralFim(KeyedScripted):
    """A scripted Codestral FIM endpoint; ``api_key`` checks ``Authorization: Bearer``."""

    routes = (("POST", r"/v1/fim/completions"), ("GET", r"/v1/models"))

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        body = request.json() or {}
        model = str(body.get("model", ""))
        if self.api_key is not None and request.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            await response.json(401, mistral_error(Reply(error="auth"), model))
            return
        if request.method == "GET":
            data = [{"id": "codestral-latest", "object": "model", "owned_by": "mistralai"}]
            await response.json(200, {"object": "list", "data": data})
            return
        reply = self.next_reply()
        await response.sleep(reply.delay_s)
        if reply.error is not None:
            await response.json(
                reply.error_status(), mistral_error(reply, model), reply.error_headers()
            )
            return
        pieces = reply.pieces()
        ident = "fim-loopback"
        usage = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": len(pieces),
            "total_tokens": reply.prompt_tokens + len(pieces),
        }
        if not body.get("stream"):
            await response.json(
                200,
                {
                    "id": ident,
                    "object": "chat.completion",
                    "model": model,
                    "usage": usage,
                    "created": now(),
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "content": reply.text,
                                "tool_calls": None,
                                "prefix": False,
                                "role": "assistant",
                            },
                            "finish_reason": reply.finish_reason,
                        }
                    ],
                },
                reply.headers,
            )
            return
        await response.start(200, {"Content-Type": "text/event-stream", **reply.headers})

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": now(),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        await response.write(sse(chunk({"role": "assistant", "content": ""}, None)))
        ok = await stream_pieces(
            response,
            reply,
            pieces,
            lambda _i, piece: sse(chunk({"content": piece}, None)),
            garbage=b"data: {not json\n\n",
            keepalive=b": keep-alive\n\n",
        )
        if not ok:
            return
        if reply.midstream_error:
            error = mistral_error(Reply(error="server", message=reply.midstream_error), model)
            await response.write(sse(error))
            await response.end()
            return
        last = chunk({"content": ""}, reply.finish_reason)
        last["usage"] = usage
        await response.write(sse(last))
        await response.write(b"data: [DONE]\n\n")
        await response.end()

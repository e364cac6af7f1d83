"""Anthropic ``POST /v1/messages``.

Streams SSE with ``event:`` names: ``message_start``, ``content_block_start``, ``ping``,
``content_block_delta`` (``text_delta``)..., ``content_block_stop``, ``message_delta``,
``message_stop``; an ``error`` event may come mid-stream. Errors are
``{"type": "error", "error": {"type", "message"}, "request_id"}``. Like current Claude
models, a conversation ending in an assistant turn (prefill) is a 400.
"""

from __future__ import annotations

from typing import Any

from tests.servers.http import RecordedRequest, Response
from tests.servers.script import KeyedScripted, sse, stream_pieces

VERSION = "2023-06-01"
PREFILL_400 = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)

ERRORS = {
    "auth": "authentication_error",
    "forbidden": "permission_error",
    "rate_limit": "rate_limit_error",
    "not_found": "not_found_error",
    "bad_request": "invalid_request_error",
    "server": "api_error",
    "unsupported": "invalid_request_error",
    "unavailable": "api_error",
    "overloaded": "overloaded_error",
    "canceled": "api_error",
}

MESSAGES = {
    "auth": "invalid x-api-key",
    "forbidden": "Your API key does not have permission to use the specified resource.",
    "rate_limit": "Number of request tokens has exceeded your per-minute rate limit",
    "not_found": "model: {model}",
    "bad_request": "Invalid request",
    "server": "Internal server error",
    "unsupported": "Not supported",
    "unavailable": "Service unavailable",
    "overloaded": "Overloaded",
    "canceled": "Request canceled",
}


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_loopback",
    }


class Anthropic(KeyedScripted):
    """A scripted Messages API; ``api_key`` checks ``x-api-key``."""

    routes = (("POST", r"/v1/messages"), ("GET", r"/v1/models"))

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        body = request.json() or {}
        model = str(body.get("model", ""))
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            await response.json(401, anthropic_error("authentication_error", MESSAGES["auth"]))
            return
        if request.method == "GET":
            data = [{"type": "model", "id": "claude-test", "display_name": "Claude Test"}]
            await response.json(200, {"data": data, "has_more": False})
            return
        if request.headers.get("anthropic-version") != VERSION:
            message = "anthropic-version: header is required"
            await response.json(400, anthropic_error("invalid_request_error", message))
            return
        messages = body.get("messages") or []
        if messages and messages[-1].get("role") == "assistant":
            await response.json(400, anthropic_error("invalid_request_error", PREFILL_400))
            return
        if "max_tokens" not in body:
            message = "max_tokens: Field required"
            await response.json(400, anthropic_error("invalid_request_error", message))
            return
        reply = self.next_reply()
        await response.sleep(reply.delay_s)
        if reply.error is not None:
            message = reply.message or MESSAGES[reply.error].format(model=model)
            await response.json(
                reply.error_status(),
                anthropic_error(ERRORS[reply.error], message),
                reply.error_headers(),
            )
            return
        pieces = reply.pieces()
        usage_in = {"input_tokens": reply.prompt_tokens, "output_tokens": 1}
        stop_reason = "end_turn" if reply.finish_reason == "stop" else "max_tokens"
        if not body.get("stream"):
            await response.json(
                200,
                {
                    "id": "msg_loopback",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": reply.text}],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": len(pieces)},
                },
                reply.headers,
            )
            return
        await response.start(
            200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **reply.headers}
        )
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_loopback",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage_in,
            },
        }
        await response.write(sse(start, "message_start"))
        block = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        await response.write(sse(block, "content_block_start"))

        def render(_index: int, piece: str) -> bytes:
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": piece},
            }
            return sse(delta, "content_block_delta")

        ok = await stream_pieces(
            response,
            reply,
            pieces,
            render,
            garbage=b"event: content_block_delta\ndata: {not json\n\n",
            keepalive=sse({"type": "ping"}, "ping"),
        )
        if not ok:
            return
        if reply.midstream_error:
            error = anthropic_error("overloaded_error", reply.midstream_error)
            await response.write(sse(error, "error"))
            await response.end()
            return
        await response.write(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": len(pieces)},
        }
        await response.write(sse(delta, "message_delta"))
        await response.write(sse({"type": "message_stop"}, "message_stop"))
        await response.end()

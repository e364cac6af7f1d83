"""Google Gemini ``models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``.

The stream is SSE of ``GenerateContentResponse`` objects separated by CRLF CRLF, text in
``candidates[0].content.parts[].text``; it simply ends. Errors are
``{"error": {"code", "message", "status", "details"}}``; a 429 carries a
``RetryInfo.retryDelay``; a bad key is a 400 with reason ``API_KEY_INVALID``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.servers.http import RecordedRequest, Response
from tests.servers.script import KeyedScripted, Reply, stream_pieces

STATUS = {
    "auth": (400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."),
    "forbidden": (403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."),
    "rate_limit": (
        429,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota, please check your plan and billing details.",
    ),
    "not_found": (
        404,
        "NOT_FOUND",
        "models/{model} is not found for API version v1beta, or is not supported for "
        "generateContent.",
    ),
    "bad_request": (400, "INVALID_ARGUMENT", "Invalid JSON payload received."),
    "server": (500, "INTERNAL", "An internal error has occurred."),
    "unsupported": (400, "FAILED_PRECONDITION", "Not supported."),
    "unavailable": (503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
    "overloaded": (503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
    "canceled": (499, "CANCELLED", "The operation was cancelled."),
}


def gemini_error(reply: Reply, model: str) -> tuple[int, dict[str, Any]]:
    assert reply.error is not None
    status, name, message = STATUS[reply.error]
    status = reply.status or status
    error: dict[str, Any] = {
        "code": status,
        "message": reply.message or message.format(model=model),
        "status": name,
    }
    if reply.error == "auth":
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
        ]
    if reply.retry_delay is not None:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"quotaMetric": "generate_content_free_tier_requests"}],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": reply.retry_delay},
        ]
    return status, {"error": error}


class Gemini(KeyedScripted):
    """A scripted Gemini API; ``api_key`` checks ``x-goog-api-key`` (or ``?key=``)."""

    routes = (
        ("POST", r"/v1(beta)?/models/[^/:]+:(stream)?[gG]enerateContent"),
        ("GET", r"/v1(beta)?/models/[^/:]+"),
    )

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        model_part, _, method = request.path.rsplit("/", 1)[-1].partition(":")
        model = model_part
        if self.api_key is not None:
            given = request.headers.get("x-goog-api-key") or (request.query.get("key") or [""])[0]
            if given != self.api_key:
                status, body = gemini_error(Reply(error="auth"), model)
                await response.json(status, body)
                return
        if request.method == "GET":
            await response.json(200, {"name": f"models/{model}", "displayName": model})
            return
        reply = self.next_reply()
        await response.sleep(reply.delay_s)
        if reply.error is not None:
            status, body = gemini_error(reply, model)
            await response.json(status, body, reply.error_headers())
            return
        pieces = reply.pieces()
        finish = "STOP" if reply.finish_reason == "stop" else "MAX_TOKENS"

        def candidate(text: str, done: bool, count: int) -> dict[str, Any]:
            out: dict[str, Any] = {
                "candidates": [
                    {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
                ],
                "usageMetadata": {
                    "promptTokenCount": reply.prompt_tokens,
                    "candidatesTokenCount": count,
                    "totalTokenCount": reply.prompt_tokens + count,
                },
                "modelVersion": model,
                "responseId": "loopback",
            }
            if done:
                out["candidates"][0]["finishReason"] = finish
            return out

        if method == "generateContent":
            await response.json(200, candidate(reply.text, True, len(pieces)), reply.headers)
            return
        if (request.query.get("alt") or [""])[0] != "sse":
            # Without alt=sse the stream is one JSON array, written piece by piece.
            await response.start(200, {"Content-Type": "application/json", **reply.headers})
            items = [candidate(p, i == len(pieces) - 1, i + 1) for i, p in enumerate(pieces)]
            await response.write(json.dumps(items))
            await response.end()
            return
        await response.start(200, {"Content-Type": "text/event-stream", **reply.headers})

        def render(index: int, piece: str) -> bytes:
            done = index == len(pieces) - 1 and not reply.midstream_error
            payload = json.dumps(candidate(piece, done, index + 1), ensure_ascii=False)
            return f"data: {payload}\r\n\r\n".encode()

        ok = await stream_pieces(
            response, reply, pieces, render, garbage=b"data: {not json\r\n\r\n", keepalive=b"\r\n"
        )
        if not ok:
            return
        if reply.midstream_error:
            status, body = gemini_error(Reply(error="server", message=reply.midstream_error), model)
            await response.write(f"data: {json.dumps(body)}\r\n\r\n".encode())
        await response.end()

"""Loopback HTTP/1.1 servers that speak each backend's wire protocol byte for byte.

Built on asyncio streams, so every byte is under the test's control: chunked framing,
SSE events (named or not, LF or CRLF), NDJSON lines, ``: keep-alive`` comments, garbage
lines, a TCP connection aborted mid-body, slow token pacing, a slow "prefill" before the
headers, and each API's documented error bodies (429 with ``Retry-After``,
``retry-after-ms``, Gemini ``RetryInfo.retryDelay``). Everything is recorded.

Quick use in a test (fixtures from :mod:`tests.servers.fixtures`, imported in conftest)::

    async def test_x(loopback):
        srv = await loopback(LlamaCpp(Reply(text='lo World")', chunk_delay_s=0.01)))
        ...  # talk to srv.url
        req = srv.requests[0]          # RecordedRequest: method, path, query, headers, json()
        await srv.wait_disconnect()    # Disconnect(request_index, path, at, chunks_sent)

From synchronous code (a bench script, a subprocess test)::

    with LoopbackServer.in_thread(OpenAI(default=Reply(text="x"))) as srv:
        subprocess.run(["anyfill", "complete", "--type", "openai-chat", "--url", srv.url, ...])
        srv.wait_disconnect_sync()

API
---
``LoopbackServer(responder)``
    ``async with`` / ``await start()`` / ``stop()``; ``in_thread(responder)`` context
    manager; ``url`` (``http://127.0.0.1:PORT``); ``requests`` (list of
    ``RecordedRequest``); ``disconnects`` (list of ``Disconnect``: the client closed the
    socket before the answer was complete; ``at`` is ``time.monotonic()``);
    ``connections`` (TCP connections accepted: shows keep-alive reuse);
    ``wait_for(pred)``, ``wait_disconnect(n)``, ``wait_disconnect_sync(n)``, ``paths()``.
``RecordedRequest``
    ``method``, ``target``, ``path``, ``query``, ``headers`` (lower-case names), ``body``,
    ``json()``, ``at``, ``connection``, ``chunks_sent``, ``finished``, ``disconnected_at``.
``Reply(...)`` (:mod:`tests.servers.script`), what the next request gets (``delay_s``,
``chunk_delay_s`` and waits end early when the client leaves):
    ``text`` (split into several chunks) or ``chunks``; ``batch`` (one text per prompt of a
    prompt list); ``error`` = ``auth|forbidden|rate_limit|not_found|bad_request|server|
    unsupported|unavailable|overloaded|canceled`` (rendered as that API's error body,
    status overridable with ``status``, text with ``message``); ``retry_after``,
    ``retry_after_ms``, ``retry_delay`` (Gemini), ``headers`` (extra response headers, e.g.
    rate-limit headers); ``delay_s`` (before the status line); ``chunk_delay_s`` (before
    each chunk); ``drop_after=N`` (abort the TCP connection after N chunks);
    ``garbage_after=N`` (a non-JSON line after N chunks); ``keepalives=N`` (comment lines
    or Anthropic ``ping`` events first); ``midstream_error`` (the API's in-stream error:
    Ollama ``{"error":..}`` line, Anthropic ``event: error``, llama.cpp ``error:`` line,
    OpenAI ``data: {"error":..}``); ``finish_reason`` ("stop" or "length");
    ``prompt_tokens``.
Responders (each ``Scripted(*replies, default=Reply())``, ``push(*replies)``; a queued
reply answers one request, then ``default`` answers the rest):
    ``LlamaCpp(fim=True, model_path=..., api_key=None, loading=False, vocab=None)``:
    ``/infill``, ``/completion``, ``/v1/completions``, ``/v1/chat/completions``, ``/props``,
    ``/health``, ``/tokenize``. ``fim=False``: ``/infill`` -> 501 ``not_supported_error``.
    ``Ollama(models={name: template}, capabilities=True)``: ``/api/generate`` (NDJSON),
    ``/api/show``, ``/api/version``; 404 for unknown models; 400 "does not support insert".
    ``OpenAI(api_key=None, reject_suffix=None, max_stop=None)``: ``/v1/completions``
    (prompt lists: one choice per prompt), ``/beta/completions``, ``/v1/chat/completions``,
    ``GET /v1/models``.
    ``MistralFim(api_key=None)``: ``/v1/fim/completions``, ``GET /v1/models``.
    ``Anthropic(api_key=None)``: ``/v1/messages`` (400 on prefill or missing
    ``anthropic-version``), ``GET /v1/models``.
    ``Gemini(api_key=None)``: ``/v1beta/models/M:generateContent``,
    ``:streamGenerateContent?alt=sse`` (CRLF-separated events), ``GET /v1beta/models/M``.
    ``AnswerKey(problems, answer=canonical, delay_s=0)`` (:mod:`tests.servers.humaneval`):
    a ``LlamaCpp`` that finds the HumanEval problem a request asks about (``/infill``, or
    the StarCoder-templated prompt or prompt list) and answers ``answer(problem)``.
    ``Router([r1, r2])`` serves several on one port (the fixture does this for you).
Responders raise nothing when the client leaves: the server cancels them and records a
``Disconnect``.
"""

from __future__ import annotations

from tests.servers.anthropic import Anthropic
from tests.servers.gemini import Gemini
from tests.servers.http import (
    HOST,
    ClientGone,
    Disconnect,
    LoopbackServer,
    RecordedRequest,
    Response,
    Router,
)
from tests.servers.llamacpp import LlamaCpp
from tests.servers.mistral import MistralFim
from tests.servers.ollama import Ollama
from tests.servers.openai import OpenAI
from tests.servers.script import SEED_ANSWER, Reply, Scripted

__all__ = [
    "HOST",
    "SEED_ANSWER",
    "Anthropic",
    "ClientGone",
    "Disconnect",
    "Gemini",
    "LlamaCpp",
    "LoopbackServer",
    "MistralFim",
    "Ollama",
    "OpenAI",
    "RecordedRequest",
    "Reply",
    "Response",
    "Router",
    "Scripted",
]

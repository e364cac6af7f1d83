"""The one place anyfill makes HTTP clients for backends.

HTTP/1.1 on purpose: closing a half-read HTTP/1.1 response closes its socket, and that is
the only cancel signal llama.cpp, Ollama and vLLM act on (with HTTP/2 httpx sends no
RST_STREAM, so a cancelled request keeps generating). The pool keeps connections alive
between requests so an interactive completion pays no connect on a warm backend.
"""

from __future__ import annotations

import httpx

from anyfill.config.model import BackendConfig

__all__ = ["make_client", "timeout_for"]

#: Sending a request body never takes long; a stuck write means a dead peer.
WRITE_TIMEOUT_S = 10.0
KEEPALIVE_EXPIRY_S = 60.0


def timeout_for(config: BackendConfig) -> httpx.Timeout:
    """Connect from the config; a read may wait at most ``first_token_s`` for any bytes."""
    t = config.timeouts
    return httpx.Timeout(
        connect=t.connect_s, read=t.first_token_s, write=WRITE_TIMEOUT_S, pool=t.total_s
    )


def make_client(config: BackendConfig) -> httpx.AsyncClient:
    """An HTTP/1.1 client with a keep-alive pool sized for the backend's concurrency.

    httpx is the API; the transport underneath is aiohttp (see ``aiohttp_transport``):
    measured by ``anyfill bench p2`` it costs a fraction of httpcore's CPU per request, far
    less at concurrency 32 (httpcore's pool contends), and it still closes the socket the
    moment a half-read response is closed or its task is cancelled (``anyfill bench p3``;
    tests/integration/scheduler/test_cancellation.py).
    """
    from anyfill.daemon.backends.aiohttp_transport import AiohttpTransport

    # Each cancel costs its connection, so leave room for reconnects next to the live ones.
    size = max(4, config.limits.max_concurrent * 2)
    limits = httpx.Limits(
        max_connections=size,
        max_keepalive_connections=size,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )
    return httpx.AsyncClient(
        transport=AiohttpTransport(limits),
        timeout=timeout_for(config),
        follow_redirects=False,
    )

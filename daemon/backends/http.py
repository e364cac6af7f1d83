"""The one place anyfill makes HTTP clients for backends.

HTTP/1.1 on purpose: closing a half-read HTTP/1.1 response closes its socket, and that is
the only cancel signal llama.cpp, Ollama and vLLM act on (with HTTP/2 httpx sends no
RST_STREAM, so a cancelled request keeps generating). The pool keeps connections alive
between requests so an interactive completion pays no connect on a warm backend.

httpx is the API backends speak (``httpx.Request``, ``httpx.Response``, httpx's
exceptions and transports). What sends the requests is :class:`BackendClient`, not
``httpx.AsyncClient``: see its docstring for why.
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Mapping
from importlib import metadata
from typing import Any, Protocol

import httpx

from anyfill.config.model import BackendConfig

__all__ = ["BackendClient", "HttpClient", "make_client", "timeout_for", "user_agent"]

#: Sending a request body never takes long; a stuck write means a dead peer.
WRITE_TIMEOUT_S = 10.0
KEEPALIVE_EXPIRY_S = 60.0


class HttpClient(Protocol):
    """What a backend sends its requests with: a :class:`BackendClient` in the daemon; an
    ``httpx.AsyncClient`` fits too (tests use one to run backends over httpcore)."""

    def build_request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Request: ...

    async def send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response: ...

    async def aclose(self) -> None: ...


def user_agent() -> str:
    try:
        version = metadata.version("anyfill")
    except metadata.PackageNotFoundError:  # a tree that was never installed
        version = "0"
    return f"anyfill/{version}"


class BackendClient:
    """httpx requests sent straight to one transport.

    ``httpx.AsyncClient.send`` runs machinery on every request that a backend never uses:
    cookie merging and extraction, auth and redirect flows, event hooks, merging the URL,
    headers and parameters with the client's. Measured by ``anyfill bench p2``, that
    machinery (with ``aiter_lines``) cost more CPU than the whole aiohttp request under it.
    This client builds the ``httpx.Request`` (with the timeouts the transport reads from
    its extensions) and hands it to the transport; the ``httpx.Response`` that comes back is
    the transport's, so closing it closes the connection as before.

    No redirects are followed (an API that redirects a POST is misconfigured, and the
    answer says so) and no cookies are kept.

    A backend asks the same few URLs with the same headers every time, so their parsed
    forms are kept: httpx parses a URL string in about 18 µs and normalises every header
    on each request, which together cost more than the aiohttp request itself.
    """

    #: Parsed URLs and header sets kept; past this the cache starts over (a backend uses
    #: a handful, so only a caller that builds URLs from user input would ever reach it).
    CACHE_SIZE = 256

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport,
        *,
        timeout: httpx.Timeout,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._transport = transport
        self._timeout = timeout.as_dict()
        self._headers = {"User-Agent": user_agent(), "Accept": "*/*", **(headers or {})}
        self._urls: dict[str, httpx.URL] = {}
        self._header_sets: dict[tuple[bytes, tuple[tuple[str, str], ...]], httpx.Headers] = {}

    def build_request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Request:
        extensions = {"timeout": self._timeout}
        if params is not None or json is None:  # rare (health probes): httpx does it all
            merged = {**self._headers, **headers} if headers else self._headers
            return httpx.Request(
                method, url, params=params, headers=merged, json=json, extensions=extensions
            )
        target = self._url(url)
        # The body encoded as httpx encodes ``json=`` (compact, UTF-8, no NaN).
        body = jsonlib.dumps(
            json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
        request = httpx.Request(
            method,
            target,
            headers=self._json_headers(target, headers),
            stream=httpx.ByteStream(body),
            extensions=extensions,
        )
        request.headers["Content-Length"] = str(len(body))
        request.read()  # the body is in memory: ``request.content`` holds it
        return request

    def _url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= self.CACHE_SIZE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _json_headers(self, url: httpx.URL, headers: Mapping[str, str] | None) -> httpx.Headers:
        """Host, ours and the backend's headers and the JSON content type, parsed once per
        distinct set (``Request`` copies them, so the kept set is never changed)."""
        key = (url.netloc, tuple(headers.items()) if headers else ())
        found = self._header_sets.get(key)
        if found is None:
            if len(self._header_sets) >= self.CACHE_SIZE:
                self._header_sets.clear()
            found = self._header_sets[key] = httpx.Headers(
                {
                    "Host": url.netloc.decode("ascii"),
                    **self._headers,
                    **(headers or {}),
                    "Content-Type": "application/json",
                }
            )
        return found

    async def send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        """The response once its head arrived; with ``stream=False`` its body is read too."""
        response = await self._transport.handle_async_request(request)
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> BackendClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def timeout_for(config: BackendConfig) -> httpx.Timeout:
    """Connect from the config; a read may wait at most ``first_token_s`` for any bytes."""
    t = config.timeouts
    return httpx.Timeout(
        connect=t.connect_s, read=t.first_token_s, write=WRITE_TIMEOUT_S, pool=t.total_s
    )


def make_client(config: BackendConfig) -> BackendClient:
    """An HTTP/1.1 client with a keep-alive pool sized for the backend's concurrency.

    The transport is aiohttp (see ``aiohttp_transport``): measured by ``anyfill bench p2``
    it costs a fraction of httpcore's CPU per request, far less at concurrency 32
    (httpcore's pool contends), and it still closes the socket the moment a half-read
    response is closed or its task is cancelled (``anyfill bench p3``;
    tests/integration/scheduler/test_cancellation.py). Proxies from the environment
    (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``) are honoured by aiohttp.
    """
    from anyfill.daemon.backends.aiohttp_transport import AiohttpTransport

    # Each cancel costs its connection, so leave room for reconnects next to the live ones.
    size = max(4, config.limits.max_concurrent * 2)
    limits = httpx.Limits(
        max_connections=size,
        max_keepalive_connections=size,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )
    return BackendClient(AiohttpTransport(limits, trust_env=True), timeout=timeout_for(config))

"""The one place anyfill makes HTTP clients for backends.

HTTP/1.1 on purpose: closing a half-read HTTP/1.1 response closes its socket, and that is
the only cancel signal llama.cpp, Ollama and vLLM act on (with HTTP/2 httpx sends no
RST_STREAM, so a cancelled request keeps generating). The pool keeps connections alive
between requests so an interactive completion pays no connect on a warm backend.

httpx is the API backends speak: each gets an ``httpx.AsyncClient``. The daemon's is a
:class:`BackendClient`, which sends backend requests straight to its transport (see its
docstring for why) over aiohttp (``aiohttp_transport``).
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import httpx

from anyfill.config.model import BackendConfig

__all__ = ["BackendClient", "make_client", "timeout_for", "user_agent"]

#: Sending a request body never takes long; a stuck write means a dead peer.
WRITE_TIMEOUT_S = 10.0
KEEPALIVE_EXPIRY_S = 60.0


def user_agent() -> str:
    try:
        version = metadata.version("anyfill")
    except metadata.PackageNotFoundError:  # a tree that was never installed
        version = "0"
    return f"anyfill/{version}"


class BackendClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` whose requests from backends go straight to its transport.

    ``AsyncClient.send`` runs machinery on every request that a backend never uses:
    cookie merging and extraction, auth and redirect flows, event hooks, merging the URL,
    headers and parameters with the client's. Measured by ``anyfill bench p2``, that
    machinery (with ``aiter_lines``) cost more CPU than the whole aiohttp request under it.
    So ``build_request`` with a JSON body and ``send`` without auth or redirects build the
    ``httpx.Request`` (with the timeouts the transport reads from its extensions) and hand
    it to the transport; the ``httpx.Response`` that comes back is the transport's, so
    closing it closes the connection as before. Anything else (cookies, other bodies, an
    auth flow, following redirects) takes httpx's own path.

    A backend asks the same few URLs with the same headers every time, so their parsed
    forms are kept: httpx parses a URL string in about 18 µs and normalises every header
    on each request, which together cost more than the aiohttp request itself. The
    client's headers and timeouts are those it was made with (``make_client`` never
    changes them later).
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
        fixed = {"User-Agent": user_agent(), "Accept": "*/*", **(headers or {})}
        # Proxies are the transport's business (it reads the environment itself).
        super().__init__(
            transport=transport,
            timeout=timeout,
            headers=fixed,
            follow_redirects=False,
            trust_env=False,
        )
        self._direct = transport
        self._fixed_headers = fixed
        self._timeouts = timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}
        self._header_sets: dict[tuple[str, tuple[tuple[str, str], ...]], httpx.Headers] = {}

    def build_request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        content: Any = None,
        data: Any = None,
        files: Any = None,
        json: Any = None,
        params: Any = None,
        headers: Any = None,
        cookies: Any = None,
        timeout: Any = httpx.USE_CLIENT_DEFAULT,
        extensions: Any = None,
    ) -> httpx.Request:
        plain_json = (
            json is not None
            and isinstance(url, str)
            and (headers is None or isinstance(headers, Mapping))
            and content is None
            and data is None
            and files is None
            and params is None
            and cookies is None
            and timeout is httpx.USE_CLIENT_DEFAULT
            and extensions is None
        )
        if not plain_json:
            return super().build_request(
                method,
                url,
                content=content,
                data=data,
                files=files,
                json=json,
                params=params,
                headers=headers,
                cookies=cookies,
                timeout=timeout,
                extensions=extensions,
            )
        assert isinstance(url, str)
        # The body encoded as httpx encodes ``json=`` (compact, UTF-8, no NaN).
        body = jsonlib.dumps(
            json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
        request = httpx.Request(
            method,
            self._url(url),
            headers=self._json_headers(url, headers),
            stream=httpx.ByteStream(body),
            extensions={"timeout": self._timeouts},
        )
        request.headers["Content-Length"] = str(len(body))
        request.read()  # the body is in memory: ``request.content`` holds it
        return request

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """The response once its head arrived; with ``stream=False`` its body is read too."""
        if auth is not httpx.USE_CLIENT_DEFAULT or follow_redirects is True:
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        response = await self._direct.handle_async_request(request)
        if not stream:
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    def _url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= self.CACHE_SIZE:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def _json_headers(self, url: str, headers: Mapping[str, str] | None) -> httpx.Headers:
        """Host, the client's and the backend's headers and the JSON content type, parsed
        once per distinct set (``Request`` copies them, so the kept set never changes)."""
        key = (url, tuple(headers.items()) if headers else ())
        found = self._header_sets.get(key)
        if found is None:
            if len(self._header_sets) >= self.CACHE_SIZE:
                self._header_sets.clear()
            found = self._header_sets[key] = httpx.Headers(
                {
                    "Host": self._url(url).netloc.decode("ascii"),
                    **self._fixed_headers,
                    **(headers or {}),
                    "Content-Type": "application/json",
                }
            )
        return found


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

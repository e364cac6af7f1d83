"""An httpx transport on aiohttp: httpx stays the API, aiohttp moves the bytes.

Why not httpcore: measured by ``anyfill bench p2`` on a 2-core machine, httpcore spends
several times aiohttp's CPU per streamed request, and its pool contends badly at
concurrency 32. Why not the ``httpx-aiohttp`` package's transport: it maps a refused
connection to ``ConnectTimeout`` (any ``ClientConnectionError`` becomes a timeout), and it
releases a half-read response instead of closing it.

What matters for anyfill:

- **closing a half-read response closes the socket at once** (``ClientResponse.close()``,
  synchronous, also when the task is being cancelled): over HTTP/1.1 that is the only
  signal that makes llama.cpp, Ollama and vLLM stop generating. A fully read response goes
  back to the keep-alive pool;
- aiohttp errors become the httpx exceptions a caller expects (refused -> ``ConnectError``
  with the ``ConnectionRefusedError`` as its cause, connect/read timeouts, a dropped body ->
  ``RemoteProtocolError``), so backends map them as they would httpcore's;
- no cookie jar (an API client has no use for one), no decompression in aiohttp (httpx
  decodes ``Content-Encoding`` itself);
- proxies from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``), as httpx honours them, looked up once per origin. aiohttp's own
  ``trust_env`` is not used: it reads ``~/.netrc`` and the environment in a worker thread
  on every request.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import NoReturn

import aiohttp
import httpx

__all__ = ["AiohttpTransport"]


#: What aiohttp and the OS raise; each becomes an httpx exception (``_raise_as_httpx``).
_FOREIGN = (aiohttp.ClientError, OSError, TimeoutError)


def _raise_as_httpx(exc: BaseException, request: httpx.Request, *, reading: bool) -> NoReturn:
    """Raise ``exc`` (one of ``_FOREIGN``) as the httpx exception a caller expects, the
    original kept as the cause. Called from ``except``: a try costs nothing on the way
    through, where a context manager per request and per body would."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
    if isinstance(exc, aiohttp.SocketTimeoutError | aiohttp.ServerTimeoutError | TimeoutError):
        raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
    if isinstance(exc, aiohttp.ClientConnectorError):
        # The OS error (refused, unreachable, DNS) stays reachable as the cause.
        error = httpx.ConnectError(str(exc), request=request)
        raise error from (exc.os_error if exc.os_error is not None else exc)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        raise httpx.RemoteProtocolError(
            "server disconnected without sending a complete response", request=request
        ) from exc
    if isinstance(exc, aiohttp.ClientPayloadError):
        raise httpx.RemoteProtocolError(
            f"peer closed connection without sending complete message body ({exc})",
            request=request,
        ) from exc
    if isinstance(exc, aiohttp.InvalidURL):
        raise httpx.UnsupportedProtocol(f"invalid URL {exc}", request=request) from exc
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError):
        cls = httpx.ReadError if reading else httpx.WriteError
        raise cls(str(exc) or type(exc).__name__, request=request) from exc
    raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc


class _Body(httpx.AsyncByteStream):
    """The response body; closing it before the end closes the connection."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except _FOREIGN as exc:
            _raise_as_httpx(exc, self._request, reading=True)

    async def aclose(self) -> None:
        response = self._response
        if response.content.at_eof():
            response.release()  # fully read: the connection goes back to the pool
        else:
            response.close()  # half read: close the socket now, the server must notice


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session (a keep-alive pool) per transport, made on first use."""

    def __init__(
        self,
        limits: httpx.Limits | None = None,
        *,
        verify: ssl.SSLContext | bool = True,
        trust_env: bool = True,
    ) -> None:
        self._limits = limits or httpx.Limits()
        self._verify = verify
        self._proxies: Mapping[str, str] = urllib.request.getproxies() if trust_env else {}
        self._proxy_for: dict[tuple[str, str, int | None], _Proxy | None] = {}
        self._ssl_context: ssl.SSLContext | bool | None = None
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, ...], aiohttp.ClientTimeout] = {}

    def _ssl(self) -> ssl.SSLContext | bool:
        """The TLS context for https URLs, made once on first use (certifi, like httpx)."""
        if self._ssl_context is None:
            verify = self._verify
            self._ssl_context = httpx.create_ssl_context() if verify is True else verify
        return self._ssl_context

    def _open(self) -> aiohttp.ClientSession:
        limits = self._limits
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=limits.keepalive_expiry or 15.0,
        )
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )

    def _timeout(self, timeouts: dict[str, float | None]) -> aiohttp.ClientTimeout:
        """aiohttp's form of httpx's timeouts, made once per distinct set (they rarely vary)."""
        key = (timeouts.get("pool"), timeouts.get("connect"), timeouts.get("read"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, connect=key[0], sock_connect=key[1], sock_read=key[2]
            )
        return timeout

    def _proxy(self, url: httpx.URL) -> _Proxy | None:
        """The proxy the environment names for this origin, if any (cached per origin)."""
        origin = (url.scheme, url.host, url.port)
        if origin not in self._proxy_for:
            self._proxy_for[origin] = _env_proxy(self._proxies, url.scheme, url.host)
        return self._proxy_for[origin]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session
        if session is None or session.closed:
            session = self._session = self._open()
        timeouts = request.extensions.get("timeout", {})
        headers = request.headers.multi_items()
        try:
            data: bytes | AsyncIterator[bytes] | None = request.content or None
        except httpx.RequestNotRead:
            data = _iterate(request.stream)
            # aiohttp frames a streamed body itself.
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        url = request.url
        proxy = self._proxy(url) if self._proxies else None
        try:
            response = await session.request(
                request.method,
                str(url),
                proxy=proxy.url if proxy else None,
                proxy_auth=proxy.auth if proxy else None,
                ssl=self._ssl() if url.scheme == "https" else True,
                headers=headers,
                data=data,
                allow_redirects=False,
                compress=False,
                timeout=self._timeout(timeouts),
            )
        except _FOREIGN as exc:
            _raise_as_httpx(exc, request, reading=False)
        extensions = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _Proxy:
    __slots__ = ("auth", "url")

    def __init__(self, url: str, auth: aiohttp.BasicAuth | None) -> None:
        self.url = url
        self.auth = auth


def _env_proxy(proxies: Mapping[str, str], scheme: str, host: str) -> _Proxy | None:
    """``proxies`` (``urllib.request.getproxies()``) applied to one origin, as httpx does:
    the scheme's proxy, else ``all``; none when ``NO_PROXY`` covers the host."""
    address = proxies.get(scheme) or proxies.get("all")
    if not address or urllib.request.proxy_bypass(host):
        return None
    if "://" not in address:
        address = f"http://{address}"
    url = httpx.URL(address)
    auth = aiohttp.BasicAuth(url.username, url.password or "") if url.username else None
    return _Proxy(str(url.copy_with(userinfo=b"")), auth)


async def _iterate(stream: httpx.AsyncByteStream | httpx.SyncByteStream) -> AsyncIterator[bytes]:
    if isinstance(stream, httpx.AsyncByteStream):
        async for chunk in stream:
            yield chunk
    else:
        for chunk in stream:
            yield chunk
            await asyncio.sleep(0)

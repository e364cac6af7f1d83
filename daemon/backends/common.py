"""The base of every HTTP backend: request building, error mapping, deadlines, cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from anyfill.daemon.backends.base import (
    Backend,
    BatchResult,
    FimPrompt,
    Plan,
    StreamObserver,
    Usage,
)
from anyfill.daemon.backends.wire import (
    error_for_status,
    map_transport_errors,
    parse_json,
    request_strings,
    transport_error,
)
from anyfill.daemon.backends.wire import (
    origin as _origin,
)
from anyfill.daemon.errors import (
    AnyfillError,
    BackendTimeout,
    BackendUnavailable,
    ProtocolError,
    UnsupportedFeature,
)
from anyfill.daemon.fim.templates import FimTemplate

__all__ = [
    "HttpBackend",
    "OpenResponse",
    "batch_results",
    "closing_stream",
    "join_url",
    "limit_stops",
    "raw_prompt",
]

T = TypeVar("T")

log = logging.getLogger("anyfill.backends")

ALTERNATIVE_TEMPERATURE = 0.7
"""The lowest temperature another sample is asked with: at the usual 0.1 a small model
gives the same answer again whatever the seed."""

#: Failures before any answer that a stale keep-alive connection causes.
STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError)

#: Keys of ``options`` that configure anyfill itself and are never sent to the server.
ANYFILL_OPTIONS = frozenset({"native_suffix", "max_stop"})


@contextlib.asynccontextmanager
async def closing_stream(chunks: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close a backend stream on exit, so its HTTP response (and socket) closes at once
    instead of whenever the garbage collector finalizes the generator."""
    try:
        yield chunks
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


@functools.lru_cache(maxsize=256)
def join_url(base: str, default_prefix: str, path: str) -> str:
    """``base`` + ``path``, adding ``default_prefix`` (e.g. ``/v1``) unless the base already
    ends with a version segment (``/v1``, ``/beta``, ``/api/v1``, ``/v1beta``).

    Cached: backends build their endpoint on every request, and parsing the URL each time
    was a measurable part of the client's CPU per request (``anyfill bench p2``)."""
    last = httpx.URL(base).path.rstrip("/").rsplit("/", 1)[-1]  # the path's, never the host's
    if (last.startswith("v") and last[1:2].isdigit()) or last == "beta":
        return f"{base.rstrip('/')}{path}"
    return f"{base.rstrip('/')}{default_prefix}{path}"


def raw_prompt(template: FimTemplate, prompt: FimPrompt) -> str:
    """``prompt`` rendered in ``template``, with the context it carries (files, language)."""
    return template.render(
        prompt.prefix,
        prompt.suffix,
        extra=prompt.extra,
        filename=prompt.filename,
        language=prompt.language,
    )


def limit_stops(stops: Iterable[str], limit: int | None) -> list[str]:
    """Unique non-empty stop strings in order, at most ``limit`` (servers cap the list).

    Dropping some costs only tokens: the cleaner cuts at every stop of the plan anyway.
    """
    seen: list[str] = []
    for stop in stops:
        if stop and stop not in seen:
            seen.append(stop)
    return seen if limit is None else seen[:limit]


class HttpBackend(Backend):
    """Shared request plumbing; subclasses build bodies and parse their stream."""

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @functools.cached_property
    def host(self) -> str:
        """The host of the configured URL, parsed once (a backend's config never changes)."""
        return httpx.URL(self.config.url).host

    def key_hint(self) -> str:
        """Appended to 'key refused' messages (where the key must come from)."""
        return ""

    def model_name(self) -> str:
        """The model the request names (a backend may have a default)."""
        return self.config.model

    def headers(self) -> dict[str, str]:
        return {**self.auth_headers(), **self.config.headers}

    def temperature(self, prompt: FimPrompt) -> float:
        """The configured temperature; for another sample (Alt+] in the preview) at least
        ``ALTERNATIVE_TEMPERATURE``, so the answer can differ from the one shown."""
        if prompt.sample > 0:
            return max(self.config.temperature, ALTERNATIVE_TEMPERATURE)
        return self.config.temperature

    def sampling(self, prompt: FimPrompt, seed_key: str = "seed") -> dict[str, Any]:
        """``temperature``, and for another sample a seed of its own under ``seed_key``
        (each wire API names it its way; '' where it has none)."""
        fields: dict[str, Any] = {"temperature": self.temperature(prompt)}
        if prompt.sample > 0 and seed_key:
            fields[seed_key] = prompt.sample
        return fields

    def max_tokens(self, prompt: FimPrompt) -> int:
        """The prompt's limit when the caller set one (> 0), else the backend's config."""
        return prompt.max_tokens if prompt.max_tokens > 0 else self.config.max_tokens

    def stops(self, plan_stops: Sequence[str], prompt: FimPrompt) -> list[str]:
        """What goes on the wire: a newline first in single-line mode, then the plan's,
        the prompt's and the config's stops."""
        first = ["\n"] if prompt.single_line else []
        return limit_stops([*first, *plan_stops, *prompt.stop, *self.config.stop], self.max_stop())

    def plan_stops(self, template_stops: Sequence[str], prompt: FimPrompt) -> tuple[str, ...]:
        """What the cleaner cuts the answer at: every stop, none dropped for a server's limit."""
        return tuple(limit_stops([*template_stops, *prompt.stop, *self.config.stop], None))

    def max_stop(self) -> int | None:
        value = self.config.options.get("max_stop")
        return int(value) if value is not None else None

    def with_options(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with the config's ``options`` merged over it (anyfill's own keys left
        out). A table merges into a table of the body (Ollama ``options``, Gemini
        ``generationConfig``), so setting one field there keeps anyfill's others."""
        merged = dict(body)
        for key, value in self.config.options.items():
            if key in ANYFILL_OPTIONS:
                continue
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        observer: StreamObserver | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> OpenResponse:
        """``async with`` it: send and yield the streaming response once its status is OK.

        The response is closed when the block exits for any reason (the consumer stopped,
        the task was cancelled): with HTTP/1.1 a half-read body closes the socket, which
        tells the server to stop generating.
        """
        request = self.client.build_request(
            method, url, json=json, params=params, headers={**self.headers(), **(headers or {})}
        )
        return OpenResponse(self, request, url, observer)

    async def _send_retrying(self, request: httpx.Request, url: str) -> httpx.Response:
        """Send once more when a pooled connection turns out closed before any answer.

        A keep-alive connection can die between two requests (llama-server closes idle ones
        after 5 s, and after an error answer): the first write or read on it fails at once.
        Nothing was generated then, so a second try on a fresh connection is safe.
        """
        try:
            try:
                return await self.client.send(request, stream=True)
            except STALE_CONNECTION as exc:
                log.debug("backend %s: pooled connection was closed (%s); retry", self.name, exc)
            return await self.client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise transport_error(self.name, url, exc) from exc

    async def probe(self, url: str) -> None:
        """GET ``url`` and read the answer: raises the mapped error unless it is OK."""
        async with self.request("GET", url) as response:
            await response.aread()

    async def post_json(self, url: str, body: Any, observer: StreamObserver | None = None) -> Any:
        """A non-streamed POST answered with one JSON document."""
        async with self.request("POST", url, json=body, observer=observer) as response:
            raw = await read_body(response, self.name, url)
        return parse_json_bytes(raw, self.name)

    def deadline(self) -> float:
        return time.monotonic() + self.config.timeouts.total_s

    def deadline_check(self, deadline: float) -> Callable[[], None]:
        """``check_deadline`` bound to ``deadline``, for stream readers that run it on every
        line (a partial costs less per call than a lambda)."""
        return functools.partial(self.check_deadline, deadline)

    def check_deadline(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise BackendTimeout(
                self.name,
                f"backend '{self.name}' took longer than timeouts.total_s "
                f"({self.config.timeouts.total_s:g} s) for one completion",
            )

    def report_plan(self, plan: Plan, observer: StreamObserver | None) -> None:
        if observer is not None:
            observer.on_plan(plan)

    async def complete_batch(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        """Without a prompt-list API: one streamed request per prompt, run together."""
        if not self.capabilities.prompt_list:
            raise UnsupportedFeature(self.name, f"backend '{self.name}' cannot batch prompts")
        return await self.batch_one_by_one(prompts, observer)

    async def batch_one_by_one(
        self, prompts: Sequence[FimPrompt], observer: StreamObserver | None = None
    ) -> list[BatchResult]:
        """Each prompt as its own streamed request, run together. Each result carries the
        plan its request used (the cleaner needs its stop strings), and the first plan is
        also reported as the batch's."""

        async def one(prompt: FimPrompt) -> BatchResult:
            seen = _PlanCatcher(observer)
            try:
                async with closing_stream(self.stream(prompt, seen)) as chunks:
                    text = "".join([chunk async for chunk in chunks])
            except AnyfillError as exc:
                return BatchResult(error=exc)
            return BatchResult(text=text, usage=seen.usage, plan=seen.plan)

        return list(await asyncio.gather(*(one(p) for p in prompts)))


class _PlanCatcher:
    """Keeps one request's plan and usage; passes headers and the first plan on."""

    __slots__ = ("outer", "plan", "usage")

    def __init__(self, outer: StreamObserver | None) -> None:
        self.outer = outer
        self.plan: Plan | None = None
        self.usage = Usage()

    def on_response(self, status: int, headers: Mapping[str, str]) -> None:
        if self.outer is not None:
            self.outer.on_response(status, headers)

    def on_usage(self, usage: Usage) -> None:
        self.usage = usage

    def on_plan(self, plan: Plan) -> None:
        self.plan = plan
        if self.outer is not None:
            self.outer.on_plan(plan)


class OpenResponse:
    """``HttpBackend.request``'s context: sends on entry (one retry on a stale pooled
    connection), raises the mapped error for an error status, closes on exit.

    A class, not ``contextlib.asynccontextmanager``: it is on every request's path, and a
    generator-based context manager costs several times more to enter and leave."""

    __slots__ = ("_backend", "_observer", "_request", "_response", "_url")

    def __init__(
        self,
        backend: HttpBackend,
        request: httpx.Request,
        url: str,
        observer: StreamObserver | None,
    ) -> None:
        self._backend = backend
        self._request = request
        self._url = url
        self._observer = observer
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        backend = self._backend
        response = self._response = await backend._send_retrying(self._request, self._url)
        try:
            if self._observer is not None:
                self._observer.on_response(response.status_code, response.headers)
            status = response.status_code
            if 300 <= status < 400:
                raise redirect_error(backend.name, status, self._url, response.headers)
            if status < 300 and "text/html" in response.headers.get("content-type", ""):
                raise ProtocolError(
                    backend.name,
                    f"backend '{backend.name}' answered {status} with an HTML page, not its "
                    f"API: {_origin(self._url)} is a web server; fix the backend's url",
                    status=status,
                )
            if response.status_code >= 400:
                with map_transport_errors(backend.name, self._url):
                    body = await response.aread()
                raise error_for_status(
                    backend.name,
                    response.status_code,
                    response.headers,
                    body,
                    url=self._url,
                    model=backend.model_name(),
                    key_hint=backend.key_hint(),
                    sent=request_strings(self._request.content),
                )
        except BaseException:
            await response.aclose()
            raise
        return response

    async def __aexit__(self, *exc_info: object) -> None:
        if self._response is not None:
            await self._response.aclose()


def redirect_error(
    backend: str, status: int, url: str, headers: Mapping[str, str]
) -> BackendUnavailable:
    """A 3xx: anyfill does not follow redirects (a key must not travel to another host)."""
    location = headers.get("location", "")
    where = (
        f" to {_origin(location)}{httpx.URL(location).path}"
        if location.startswith(("http://", "https://"))
        else (f" to {location.split('?', 1)[0]}" if location else "")
    )
    return BackendUnavailable(
        backend,
        f"backend '{backend}' answered {status}, a redirect{where}; anyfill does not follow "
        f"redirects: set the backend's url to the address the server points to",
        status=status,
    )


async def read_body(response: httpx.Response, backend: str, url: str) -> bytes:
    """The whole body; a transport failure or a body its Content-Encoding cannot decode
    becomes our error."""
    with map_transport_errors(backend, url, streaming=True):
        try:
            return await response.aread()
        except httpx.DecodingError as exc:
            raise ProtocolError(
                backend,
                f"backend '{backend}' sent a body that its Content-Encoding "
                f"({response.headers.get('content-encoding', '?')}) cannot decode",
            ) from exc


def parse_json_bytes(raw: bytes, backend: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(
            backend, f"backend '{backend}' sent text that is not valid UTF-8; refused"
        ) from exc
    return parse_json(text, backend)


def batch_results(
    backend: str, answer: Any, count: int, observer: StreamObserver | None
) -> list[BatchResult]:
    """Per-prompt results of an OpenAI-style completions answer, matched by ``index``."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list):
        raise ProtocolError(backend, f"backend '{backend}' answered a batch without 'choices'")
    results = [
        BatchResult(error=ProtocolError(backend, f"backend '{backend}' left prompt {i} unanswered"))
        for i in range(count)
    ]
    for position, choice in enumerate(choices):
        index = choice.get("index", position) if isinstance(choice, dict) else None
        if isinstance(index, int) and 0 <= index < count:
            results[index] = BatchResult(text=str(choice.get("text") or ""))
    usage = answer.get("usage")
    if observer is not None and isinstance(usage, dict):
        observer.on_usage(Usage(usage.get("prompt_tokens"), usage.get("completion_tokens")))
    return results

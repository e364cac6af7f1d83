"""``BackendClient``: what reaches the server, proxies from the environment, and httpx's
own client as a drop-in (over httpcore)."""

from __future__ import annotations

import json

import httpx
import pytest

from anyfill.config.model import BackendConfig
from anyfill.daemon.backends.http import make_client, user_agent
from anyfill.daemon.backends.registry import create_backend
from tests.integration.backends.helpers import SEED, collect
from tests.servers import SEED_ANSWER, OpenAI
from tests.servers.fixtures import StartServer

BODY = {"model": "m", "prompt": "naïve “quotes” 😀", "max_tokens": 8, "stream": True}


def config_for(url: str) -> BackendConfig:
    return BackendConfig(name="c", type="openai-completions", url=url, model="qwen2.5-coder")


async def test_the_request_on_the_wire(loopback: StartServer) -> None:
    srv = await loopback(OpenAI())
    url = f"{srv.url}/v1/completions"
    async with make_client(config_for(srv.url)) as client:
        for _ in range(2):  # the second request comes from the kept URL and headers
            request = client.build_request(
                "POST", url, json=BODY, headers={"Authorization": "Bearer k"}
            )
            response = await client.send(request)
            assert response.status_code == 200
    first, second = srv.requests
    expected = httpx.Request("POST", url, json=BODY).content  # httpx's own JSON encoding
    for seen in (first, second):
        assert seen.target == "/v1/completions"
        assert seen.body == expected
        assert json.loads(seen.body) == BODY
        assert seen.headers["content-type"] == "application/json"
        assert seen.headers["content-length"] == str(len(expected))
        assert seen.headers["host"] == srv.url.removeprefix("http://")
        assert seen.headers["user-agent"] == user_agent()
        assert seen.headers["authorization"] == "Bearer k"
    assert second.connection == first.connection  # kept alive


async def test_query_parameters_and_bodiless_requests(loopback: StartServer) -> None:
    srv = await loopback(OpenAI())
    async with make_client(config_for(srv.url)) as client:
        request = client.build_request("GET", f"{srv.url}/v1/models", params={"a": "b c"})
        response = await client.send(request)
        assert response.status_code == 200
        assert response.json()["data"]
    assert srv.requests[0].target == "/v1/models?a=b+c"


async def test_an_environment_proxy_carries_the_request(
    loopback: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = await loopback(OpenAI())  # answers in the API's place, as a forward proxy would
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    config = config_for("http://api.example.invalid")  # never resolved: the proxy is asked
    async with make_client(config) as client:
        chunks = await collect(create_backend(config, client), SEED)
    assert "".join(chunks) == SEED_ANSWER
    (seen,) = proxy.requests
    assert seen.target == "http://api.example.invalid/v1/completions"
    assert seen.headers["host"] == "api.example.invalid"


async def test_no_proxy_goes_direct(loopback: StartServer, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = await loopback(OpenAI())
    direct = await loopback(OpenAI())
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    config = config_for(direct.url)
    async with make_client(config) as client:
        chunks = await collect(create_backend(config, client), SEED)
    assert "".join(chunks) == SEED_ANSWER
    assert not proxy.requests
    assert direct.requests[0].target == "/v1/completions"


async def test_httpx_async_client_fits_as_the_client(loopback: StartServer) -> None:
    """A plain ``httpx.AsyncClient`` works as well: it goes through httpcore."""
    srv = await loopback(OpenAI())
    config = config_for(srv.url)
    async with httpx.AsyncClient() as client:
        chunks = await collect(create_backend(config, client), SEED)
    assert "".join(chunks) == SEED_ANSWER


async def test_it_is_an_httpx_client_with_httpx_api(loopback: StartServer) -> None:
    srv = await loopback(OpenAI())
    client = make_client(config_for(srv.url))
    assert isinstance(client, httpx.AsyncClient)
    async with client:
        answer = await client.post(f"{srv.url}/v1/completions", json={**BODY, "stream": False})
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["text"] == SEED_ANSWER
        async with client.stream("GET", f"{srv.url}/v1/models") as response:
            assert [line async for line in response.aiter_lines()]
    assert srv.requests[0].headers["user-agent"] == user_agent()
    assert srv.requests[1].headers["user-agent"] == user_agent()  # httpx's own path too
    with pytest.raises(RuntimeError, match="closed"):
        await client.send(client.build_request("POST", f"{srv.url}/v1/completions", json={}))

"""pytest fixtures for the loopback servers.

Use them from a ``conftest.py``::

    from tests.servers.fixtures import loopback, refused_url  # noqa: F401
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.servers.http import HOST, LoopbackServer, Responder, Router

StartServer = Callable[..., Awaitable[LoopbackServer]]


@pytest.fixture
async def loopback() -> AsyncIterator[StartServer]:
    """A factory: ``srv = await loopback(LlamaCpp(), Ollama())`` starts a server on
    127.0.0.1 with those responders (several are routed by path); all stop at teardown."""
    servers: list[LoopbackServer] = []

    async def start(*responders: Responder) -> LoopbackServer:
        responder: Responder = responders[0] if len(responders) == 1 else Router(list(responders))
        server = await LoopbackServer(responder).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
def refused_url() -> str:
    """A loopback URL where nothing listens (the port was just free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    return f"http://{HOST}:{port}"

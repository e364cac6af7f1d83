"""A stand-in daemon for the orphan tests: an Engine whose managed backend starts
llama-server, prints the server's pid, then waits to be killed.

    python daemon_child.py BINARY MODEL LOG_DIR
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.engine import Engine
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend


async def main(binary: str, model: str, logs: str) -> None:
    config = BackendConfig.model_validate(
        {
            "name": "managed",
            "type": "llamacpp-managed",
            "model": model,
            "server": {"binary": binary},
        }
    )
    settings = Settings(backends=[config], routing=RoutingConfig(default=["managed"]))
    async with Engine(settings) as engine:
        backend = engine.backends["managed"]
        assert isinstance(backend, ManagedLlamaCppBackend)
        backend.supervisor.logs = Path(logs)
        await backend.supervisor.ready_url(60)
        assert backend.supervisor.process is not None
        print(backend.supervisor.process.pid, flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))

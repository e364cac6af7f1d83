"""A stand-in daemon for the orphan tests: an Engine whose managed backend starts
llama-server, prints the server's pid, then waits to be killed.

    python daemon_child.py BINARY MODEL LOG_DIR TIE

TIE is ``pdeathsig`` or ``pipe`` (the guard process; the server is then its child).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend


def server_pid(pid: int, tie: str) -> int:
    if tie != "pipe":
        return pid
    for _ in range(100):  # the guard starts the server at once
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise RuntimeError("the guard started no server")


async def main(binary: str, model: str, logs: str, tie: str) -> None:
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
        backend.supervisor.tie = tie  # type: ignore[assignment]
        await backend.supervisor.ready_url(60)
        assert backend.supervisor.process is not None
        print(server_pid(backend.supervisor.process.pid, tie), flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))

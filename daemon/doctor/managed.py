"""``anyfill doctor`` lines for a managed llama-server: which binary, which model.

Read-only like every doctor check: it runs ``llama-server --version`` but never starts a
server or downloads anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

from anyfill.config.model import BackendConfig, ModelsConfig
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.managed.runtime import NoRuntime, find_runtime
from anyfill.daemon.models.catalog import human_size
from anyfill.daemon.models.store import resolve_model

__all__ = ["managed_findings"]

VERSION_TIMEOUT_S = 10.0

Line = tuple[Literal["ok", "warn", "fail"], str, str]


async def _version(argv: list[str]) -> str:
    with contextlib.suppress(OSError, TimeoutError):
        process = await asyncio.create_subprocess_exec(
            *argv,
            "--version",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(VERSION_TIMEOUT_S):
                out, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        for line in out.decode("utf-8", "replace").splitlines():
            if line.startswith("version:"):
                return line.removeprefix("version:").strip()
    return ""


async def managed_findings(config: BackendConfig, models: ModelsConfig) -> list[Line]:
    """(status, topic, detail) for the binary and the model of one managed backend."""
    topic = f"backend {config.name}"
    found = find_runtime(config.server.binary)
    if isinstance(found, NoRuntime):
        binary: Line = ("fail", f"{topic} binary", f"{found.detail}; {found.fix}")
    elif found.program:  # the prebuilt runtime: its version is in its name already
        binary = (
            "ok",
            f"{topic} binary",
            f"{found.source} ({found.path}; no llama-server found, the compiled one is "
            "faster where there is one)",
        )
    else:
        version = await _version(found.argv)
        text = f", version {version}" if version else ""
        binary = ("ok", f"{topic} binary", f"{found.path} (from {found.source}{text})")
    try:
        model = resolve_model(config.model, models)
    except ConfigError as exc:
        return [binary, ("fail", f"{topic} model", str(exc))]
    if model.present:
        size = human_size(model.path.stat().st_size)
        return [binary, ("ok", f"{topic} model", f"{model.path} ({size})")]
    if model.catalog is not None:
        entry = model.catalog
        partial = model.partial_bytes
        kept = f"; {human_size(partial)} already downloaded" if partial else ""
        detail = (
            f"{entry.name} ({entry.size_text}) is not downloaded yet{kept}: run "
            f"'anyfill model pull {entry.name}' (it goes to {model.path.parent})"
        )
        return [binary, ("warn", f"{topic} model", detail)]
    return [
        binary,
        ("fail", f"{topic} model", f"no GGUF file at {model.path}: 'anyfill model use NAME|PATH'"),
    ]

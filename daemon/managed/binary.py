"""Finding ``llama-server``: the config's path, then PATH, then anyfill's own build."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["INSTALL_HINT", "FoundBinary", "build_cache_root", "find_binary"]

BINARY = "llama-server"

INSTALL_HINT = (
    "install llama.cpp (Debian 13+ / Ubuntu 25.04+: 'sudo apt install llama.cpp'; macOS: "
    "'brew install llama.cpp'; Windows: 'winget install llama.cpp'; Nix: 'nix profile install "
    "nixpkgs#llama-cpp') or build it from anyfill's checkout with 'scripts/setup --local' "
    "(about 5 min on 2 cores, once)"
)


@dataclass(frozen=True)
class FoundBinary:
    path: Path
    source: str
    """'config', 'PATH', 'anyfill build' or the prebuilt runtime (see ``runtime``)."""
    program: tuple[str, ...] = ()
    """The command that runs it, when that is not ``path`` itself (the prebuilt runtime is
    a Python module); it takes llama-server's arguments either way."""

    @property
    def argv(self) -> list[str]:
        return list(self.program) if self.program else [str(self.path)]


def build_cache_root() -> Path:
    """Where ``scripts/setup --local`` (``.ci/llama-server.sh``) keeps its build."""
    override = os.environ.get("ANYFILL_LLAMA_CACHE")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "anyfill" / "llama"


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(configured: str = "") -> FoundBinary | None:
    """The llama-server to run, or None. A configured path that is not there is None too:
    the user asked for that one."""
    if configured:
        path = Path(configured).expanduser()
        return FoundBinary(path, "config") if _runnable(path) else None
    on_path = shutil.which(BINARY)
    if on_path:
        return FoundBinary(Path(on_path), "PATH")
    root = build_cache_root()
    built = sorted(root.glob(f"*/{BINARY}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in built:
        if _runnable(path):
            return FoundBinary(path, "anyfill build")
    return None

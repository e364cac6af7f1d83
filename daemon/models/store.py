"""Where models live: the models folder (user cache dir) and what a config's ``model`` means.

A managed backend's ``model`` is either a catalogue name (``qwen2.5-coder-1.5b``), kept as
``<models dir>/<file name>``, or the path of a GGUF file the user has. A download in
progress is ``<file name>.part`` next to it until its checksum is verified.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from anyfill.config.model import ModelsConfig
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.models.catalog import CATALOG, CatalogModel, find

__all__ = ["LocalModel", "models_dir", "part_path", "resolve_model"]

PART_SUFFIX = ".part"


def models_dir(config: ModelsConfig | None = None) -> Path:
    if config is not None and config.dir:
        return Path(config.dir).expanduser()
    return Path(platformdirs.user_cache_dir("anyfill", appauthor=False)) / "models"


def part_path(path: Path) -> Path:
    return path.with_name(path.name + PART_SUFFIX)


@dataclass(frozen=True)
class LocalModel:
    """What a config's ``model`` points at, and whether the file is there."""

    spec: str
    path: Path
    catalog: CatalogModel | None
    """The catalogue entry when ``spec`` names one (it can then be downloaded)."""

    @property
    def present(self) -> bool:
        return self.path.is_file()

    @property
    def partial_bytes(self) -> int:
        try:
            return part_path(self.path).stat().st_size
        except OSError:
            return 0


def looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.lower().endswith(".gguf") or spec.startswith("~")


def resolve_model(spec: str, config: ModelsConfig | None = None) -> LocalModel:
    """The file a ``model`` setting means; a ConfigError for an unknown name."""
    spec = spec.strip()
    if not spec:
        raise ConfigError(
            "a managed llama-server needs a model: a name from 'anyfill model list' "
            "or the path of a GGUF file",
            key="model",
        )
    if looks_like_path(spec):
        return LocalModel(spec, Path(spec).expanduser(), None)
    entry = find(spec)
    if entry is None:
        known = ", ".join(model.name for model in CATALOG)
        raise ConfigError(
            f"unknown model {spec!r}; known: {known}, or the path of a GGUF file", key="model"
        )
    return LocalModel(spec, models_dir(config) / entry.filename, entry)

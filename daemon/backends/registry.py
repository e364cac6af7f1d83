"""Config ``type`` -> backend class, and building a backend from its config.

Backend types are plugins: each is an entry point of the ``anyfill.backends`` group
(``pyproject.toml`` declares the built-in ones), loaded by name when a config uses it, so
this module imports no backend and no layer that owns one (the managed server, the MQTT
pool). Every type builds itself through :meth:`Backend.create` with a
:class:`BackendContext`; the registry knows no type by class.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from importlib import metadata

import httpx

from anyfill.config.model import BACKEND_TYPES, BackendConfig, ModelsConfig
from anyfill.config.secrets import refuse_clear_text
from anyfill.daemon.backends.base import Backend, BackendContext
from anyfill.daemon.backends.leases import Leases
from anyfill.daemon.bus import EventBus
from anyfill.daemon.errors import ConfigError

__all__ = ["BACKEND_CLASSES", "ENTRY_POINT_GROUP", "backend_class", "create_backend"]

ENTRY_POINT_GROUP = "anyfill.backends"


@cache
def _entry_points() -> Mapping[str, metadata.EntryPoint]:
    return {entry.name: entry for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)}


@cache
def backend_class(type_name: str) -> type[Backend]:
    entry = _entry_points().get(type_name)
    if entry is None:
        if type_name in BACKEND_TYPES:  # a known type without its entry point: a stale install
            raise ConfigError(
                f"backend type {type_name!r} is not installed (no {ENTRY_POINT_GROUP!r} entry "
                "point); reinstall anyfill (pip install -e . in a checkout)",
                key="type",
            )
        raise ConfigError(
            f"unknown backend type {type_name!r}; known types: {', '.join(BACKEND_TYPES)}",
            key="type",
        )
    cls = entry.load()
    if not (isinstance(cls, type) and issubclass(cls, Backend) and cls.type_name == type_name):
        raise ConfigError(
            f"entry point {entry.value!r} is not the Backend class of type {type_name!r}",
            key="type",
        )
    return cls


class _Classes(Mapping[str, type[Backend]]):
    """Every backend type the config knows, each class loaded on first use."""

    def __getitem__(self, type_name: str) -> type[Backend]:
        if type_name not in BACKEND_TYPES:
            raise KeyError(type_name)
        return backend_class(type_name)

    def __iter__(self) -> Iterator[str]:
        return iter(BACKEND_TYPES)

    def __len__(self) -> int:
        return len(BACKEND_TYPES)


BACKEND_CLASSES: Mapping[str, type[Backend]] = _Classes()


def create_backend(
    config: BackendConfig,
    client: httpx.AsyncClient,
    api_key: str | None = None,
    *,
    bus: EventBus | None = None,
    models: ModelsConfig | None = None,
    leases: Leases | None = None,
) -> Backend:
    """The backend for ``config``; a managed one publishes its server's state on ``bus``
    and finds its model with ``models``.

    Every request starts from a backend built here, so this is where a key meant for plain
    http:// to another host is refused (:class:`ConfigError`), whoever supplied it."""
    if api_key:
        refuse_clear_text(config)
    return backend_class(config.type).create(
        config, client, api_key, BackendContext(bus=bus, models=models, leases=leases)
    )

"""Pointing the managed backend at another model in the config file, comments kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit

from anyfill.config.model import Settings
from anyfill.config.store import atomic_write, default_config_text, parse_settings

__all__ = ["set_managed_model"]

MANAGED_TYPE = "llamacpp-managed"


def set_managed_model(path: Path, model: str, backend: str | None = None) -> tuple[Settings, str]:
    """Set ``model`` on the managed backend (``backend`` names one when there are several).

    A file without a managed backend gets one, named ``managed``, added to the end of
    ``routing.default``. Validated before anything is written. Returns the new settings
    and the backend's name."""
    text = path.read_text("utf-8") if path.exists() else default_config_text()
    document = tomlkit.parse(text)
    tables: Any = document.get("backends")
    target: Any = None
    if tables is not None:
        for table in tables:
            if table.get("type") != MANAGED_TYPE:
                continue
            if backend is None or table.get("name") == backend:
                target = table
                break
    if target is None:
        name = backend or "managed"
        if tables is None:
            # The file keeps the default backends: write them out, the user's servers first.
            tables = tomlkit.aot()
            for default in Settings().backends:
                if default.type != MANAGED_TYPE:
                    tables.append(_table(default.name, default.type, default.url, default.model))
            document["backends"] = tables
        target = _table(name, MANAGED_TYPE, None, model)
        tables.append(target)
        routing: Any = document.get("routing")
        if routing is not None and "default" in routing and name not in routing["default"]:
            routing["default"].append(name)
    target["model"] = model
    new_text = tomlkit.dumps(document)
    settings = parse_settings(new_text, path=str(path), environ={})
    atomic_write(path, new_text)
    return settings, str(target["name"])


def _table(name: str, type_: str, url: str | None, model: str) -> Any:
    table = tomlkit.table()
    table["name"] = name
    table["type"] = type_
    if url:
        table["url"] = url
    if model:
        table["model"] = model
    return table

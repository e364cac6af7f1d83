"""This install's version, for ``--version``, ``ping``, the MQTT status and HTTP user agents."""

from __future__ import annotations

from functools import cache
from importlib import metadata


@cache
def version_string() -> str:
    try:
        return metadata.version("anyfill")
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "0+unknown"

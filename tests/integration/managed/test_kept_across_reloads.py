"""A settings change builds a new engine: the managed llama-server it runs is kept when
nothing of the server changed (its name, port, model, ``[backends.server]``, ``[models]``),
and replaced (the old one stopped) when something did. Saving any setting in the panel used
to stop and load the server again. Without a llama-server binary (the supervisor's own
objects are compared); tests/e2e/test_managed_daemon.py shows the same with the real one."""

from __future__ import annotations

from pathlib import Path

from anyfill.config.model import Settings
from anyfill.daemon.app import default_completer
from anyfill.daemon.bus import EventBus
from anyfill.daemon.engine.swappable import SwappableCompleter
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend


def _settings(tmp_path: Path, **changes: object) -> Settings:
    managed: dict[str, object] = {
        "name": "managed",
        "type": "llamacpp-managed",
        "model": str(tmp_path / "model.gguf"),
        "max_tokens": 16,
        "server": {"binary": str(tmp_path / "no-llama-server"), "context_size": 1024},
    }
    managed.update(changes.pop("managed", {}))  # type: ignore[call-overload]
    data: dict[str, object] = {
        "backends": [
            {"name": "mine", "type": "llamacpp", "url": "http://127.0.0.1:9"},
            managed,
        ],
        "routing": {"default": ["mine", "managed"]},
        **changes,
    }
    return Settings.model_validate(data)


def _managed(completer: SwappableCompleter) -> ManagedLlamaCppBackend:
    backend = completer.current.backends["managed"]  # type: ignore[union-attr]
    assert isinstance(backend, ManagedLlamaCppBackend)
    return backend


async def test_an_unchanged_managed_server_is_kept_and_a_changed_one_replaced(
    tmp_path: Path,
) -> None:
    async with SwappableCompleter(default_completer, EventBus()) as completer:
        await completer.start(_settings(tmp_path))
        first = _managed(completer).supervisor
        key = first.api_key

        # other backends, routing, this backend's request settings: the same server
        await completer.replace(_settings(tmp_path, completion={"max_prefix_chars": 2000}))
        await completer.replace(_settings(tmp_path, managed={"max_tokens": 48, "temperature": 0.3}))
        assert _managed(completer).supervisor is first
        assert _managed(completer).api_key == key  # the server's key file still matches
        assert not first._closing
        assert len(completer.leases) == 1

        # the server's own settings: a new one, the old one stopped
        await completer.replace(_settings(tmp_path, managed={"server": {"context_size": 2048}}))
        second = _managed(completer).supervisor
        assert second is not first
        assert first._closing
        assert len(completer.leases) == 1
    assert second._closing  # closing the completer stops the last one
    assert len(completer.leases) == 0

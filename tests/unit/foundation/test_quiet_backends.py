"""Which backends may be absent without a word (``managed.optional``): the shipped local
servers the user never changed, when a managed server follows them in the chain."""

from __future__ import annotations

from anyfill.config.model import Settings
from anyfill.config.store import default_config_text, parse_settings
from anyfill.daemon.managed.optional import quiet_when_absent


def test_the_defaults_before_the_managed_server_are_quiet() -> None:
    assert quiet_when_absent(Settings()) == {"llamacpp", "ollama"}
    # `anyfill config init` writes the same backends: still never set up by the user.
    written = parse_settings(default_config_text(), path="config.toml", environ={})
    assert quiet_when_absent(written) == {"llamacpp", "ollama"}


def test_a_changed_or_moved_backend_is_not_quiet() -> None:
    moved = parse_settings(
        "",
        path="config.toml",
        environ={"ANYFILL_BACKENDS__LLAMACPP__URL": "http://127.0.0.1:8081"},
    )
    assert quiet_when_absent(moved) == {"ollama"}
    after = Settings.model_validate({"routing": {"default": ["managed", "llamacpp", "ollama"]}})
    assert quiet_when_absent(after) == set()
    no_managed = Settings.model_validate({"routing": {"default": ["llamacpp", "ollama"]}})
    assert quiet_when_absent(no_managed) == set()

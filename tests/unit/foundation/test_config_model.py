from __future__ import annotations

import pytest
from pydantic import ValidationError

from anyfill.config.model import BackendConfig, Settings


def test_defaults_try_the_users_servers_then_the_managed_one() -> None:
    settings = Settings()
    assert [(b.name, b.type, b.url) for b in settings.backends] == [
        ("llamacpp", "llamacpp", "http://127.0.0.1:8080"),
        ("ollama", "ollama", "http://127.0.0.1:11434"),
        ("managed", "llamacpp-managed", "http://127.0.0.1:0"),
    ]
    assert settings.routing.default == ["llamacpp", "ollama", "managed"]
    assert settings.backend("managed").model == "qwen2.5-coder-1.5b"
    assert settings.privacy.log_text is False
    assert settings.mqtt.enabled is False


def test_unknown_key_is_an_error() -> None:
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({"routing": {"fallbak": True}})
    error = info.value.errors()[0]
    assert error["type"] == "extra_forbidden"
    assert error["loc"] == ("routing", "fallbak")


def test_routing_must_name_defined_backends() -> None:
    with pytest.raises(ValidationError, match="unknown backend"):
        Settings.model_validate({"routing": {"default": ["nope"]}})


def test_backend_names_are_unique() -> None:
    backend = {"name": "a", "type": "ollama", "url": "http://127.0.0.1:1"}
    with pytest.raises(ValidationError, match="repeated: a"):
        Settings.model_validate({"backends": [backend, backend], "routing": {"default": ["a"]}})


@pytest.mark.parametrize("url", ["not a url", "ftp://example.org", ""])
def test_backend_url_must_be_http(url: str) -> None:
    with pytest.raises(ValidationError):
        BackendConfig(name="x", type="llamacpp", url=url)


def test_backend_url_loses_trailing_slash() -> None:
    assert BackendConfig(name="x", type="llamacpp", url="http://h:1/v1/").url == "http://h:1/v1"


def test_backend_type_is_checked() -> None:
    with pytest.raises(ValidationError, match="llamacpp"):
        BackendConfig.model_validate({"name": "x", "type": "llama", "url": "http://h"})


@pytest.mark.parametrize("hotkey", ["ctrl alt", "<ctrl>++", "<ctrl>+ab"])
def test_bad_hotkeys_are_rejected(hotkey: str) -> None:
    with pytest.raises(ValidationError, match="not a hotkey"):
        Settings.model_validate({"hotkeys": {"complete": hotkey}})


def test_newer_schema_version_says_to_upgrade() -> None:
    with pytest.raises(ValidationError, match="upgrade anyfill"):
        Settings.model_validate({"schema_version": 99})


def test_app_rule_match_must_be_a_regex() -> None:
    with pytest.raises(ValidationError, match="not a regular expression"):
        Settings.model_validate({"insert": {"apps": [{"match": "("}]}})


def test_default_rules_keep_terminals_and_password_managers_safe() -> None:
    rules = Settings().insert.apps
    terminal = next(rule for rule in rules if rule.capture == ["clipboard"])
    import re

    assert re.search(terminal.match, "xterm")
    assert terminal.copy_keys == "<ctrl>+<shift>+c"
    secret = next(rule for rule in rules if rule.disabled)
    assert re.search(secret.match, "KeePassXC")


def test_cloud_backends_need_keys_and_name_their_env_var() -> None:
    backend = BackendConfig(name="c", type="mistral-fim", url="https://codestral.mistral.ai")
    assert backend.needs_key
    assert backend.api_key_env == "MISTRAL_API_KEY"
    custom = BackendConfig(name="c", type="anthropic", url="https://h", key_env="MY_KEY")
    assert custom.api_key_env == "MY_KEY"
    assert not BackendConfig(name="l", type="llamacpp", url="http://h").needs_key


def test_a_managed_backend_needs_no_url_and_stays_on_loopback() -> None:
    managed = BackendConfig.model_validate({"name": "m", "type": "llamacpp-managed"})
    assert managed.url == "http://127.0.0.1:0"  # port 0: a free one at each start
    fixed = BackendConfig.model_validate(
        {"name": "m", "type": "llamacpp-managed", "url": "http://127.0.0.1:8091"}
    )
    assert fixed.url == "http://127.0.0.1:8091"
    with pytest.raises(ValidationError, match=r"listens on http://127\.0\.0\.1 only"):
        BackendConfig.model_validate(
            {"name": "m", "type": "llamacpp-managed", "url": "http://192.168.1.5:8080"}
        )
    with pytest.raises(ValidationError, match="url"):
        BackendConfig.model_validate({"name": "x", "type": "llamacpp"})  # others still need one


def test_a_file_with_its_own_backends_and_no_routing_still_loads() -> None:
    # Written before the managed backend existed: the default chain must not name it.
    settings = Settings.model_validate(
        {"backends": [{"name": "llamacpp", "type": "llamacpp", "url": "http://127.0.0.1:8080"}]}
    )
    assert settings.routing.default == ["llamacpp"]
    with pytest.raises(ValidationError, match="unknown backend"):
        Settings.model_validate(
            {
                "backends": [{"name": "a", "type": "llamacpp", "url": "http://127.0.0.1:8080"}],
                "routing": {"default": ["a", "managed"]},
            }
        )

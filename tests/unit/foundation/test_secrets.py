from __future__ import annotations

import pytest

from anyfill.config.model import BackendConfig
from anyfill.config.secrets import delete_api_key, resolve_api_key, store_api_key
from anyfill.daemon.errors import NeedsKeyError

CODESTRAL = BackendConfig(name="codestral", type="mistral-fim", url="https://codestral.mistral.ai")


def test_keyring_key_wins_over_environment(file_keyring: object) -> None:
    store_api_key("codestral", "  key-from-keyring \n")
    assert resolve_api_key(CODESTRAL, {"MISTRAL_API_KEY": "env-key"}) == "key-from-keyring"
    assert delete_api_key("codestral")
    assert resolve_api_key(CODESTRAL, {"MISTRAL_API_KEY": "env-key"}) == "env-key"


def test_missing_key_says_exactly_how_to_set_it(file_keyring: object) -> None:
    with pytest.raises(NeedsKeyError) as info:
        resolve_api_key(CODESTRAL, {})
    message = str(info.value)
    assert "anyfill config set-key codestral" in message
    assert "MISTRAL_API_KEY" in message


def test_local_backend_without_key_is_fine(file_keyring: object) -> None:
    local = BackendConfig(name="llamacpp", type="llamacpp", url="http://127.0.0.1:8080")
    assert resolve_api_key(local, {}) is None


def test_keys_are_per_backend_name(file_keyring: object) -> None:
    store_api_key("other", "k-other")
    with pytest.raises(NeedsKeyError):
        resolve_api_key(CODESTRAL, {})


def test_key_status_says_where_the_key_comes_from_and_never_shows_it(
    file_keyring: object,
) -> None:
    from anyfill.config.secrets import key_status

    assert key_status(CODESTRAL, {}).describe() == "no key stored and $MISTRAL_API_KEY is not set"
    from_env = key_status(CODESTRAL, {"MISTRAL_API_KEY": "env-secret"})
    assert from_env.describe() == "the key comes from the environment variable $MISTRAL_API_KEY"
    store_api_key("codestral", "stored-secret")
    status = key_status(CODESTRAL, {"MISTRAL_API_KEY": "env-secret"})
    assert status.in_keyring
    assert "stored-secret" not in repr(status)
    assert "takes precedence over $MISTRAL_API_KEY" in status.describe()
    assert delete_api_key("codestral")
    assert not key_status(CODESTRAL, {}).in_keyring

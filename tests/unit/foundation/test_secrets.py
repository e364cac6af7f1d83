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

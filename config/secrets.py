"""API keys: the system keyring first, then an environment variable, never the TOML file."""

from __future__ import annotations

import os
from collections.abc import Mapping

from anyfill.config.model import BackendConfig, is_loopback, url_host
from anyfill.daemon.errors import ConfigError, NeedsKeyError

KEYRING_SERVICE = "anyfill"

__all__ = ["KEYRING_SERVICE", "delete_api_key", "resolve_api_key", "store_api_key"]


def _keyring_get(name: str) -> str | None:
    import keyring
    import keyring.errors

    try:
        return keyring.get_password(KEYRING_SERVICE, name)
    except keyring.errors.KeyringError:
        # No keyring daemon (common on bare Linux sessions): the env var still works.
        return None


def resolve_api_key(backend: BackendConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The backend's key from the keyring, else its environment variable.

    Returns None for a backend that works without a key; raises :class:`NeedsKeyError`
    with both ways to fix it when a key is required and neither place has one.
    """
    environ = os.environ if environ is None else environ
    key = _keyring_get(backend.name)
    env_var = backend.api_key_env
    if not key and env_var and environ.get(env_var):
        key = environ[env_var]
    if key:
        _refuse_clear_text(backend)
        return key
    if not backend.needs_key:
        return None
    fixes = f"run 'anyfill config set-key {backend.name}' to store it in the system keyring"
    if env_var:
        fixes += f", or set the environment variable {env_var}"
    else:
        fixes += ", or name an environment variable that holds it with key_env"
    raise NeedsKeyError(f"backend '{backend.name}' needs an API key: {fixes}")


def _refuse_clear_text(backend: BackendConfig) -> None:
    """A key never travels unencrypted past this machine unless the user said so."""
    clear = backend.url.lower().startswith("http://") and not is_loopback(backend.url)
    if clear and not backend.allow_insecure_http:
        raise ConfigError(
            f"backend '{backend.name}' would send its API key unencrypted over "
            f"http:// to {url_host(backend.url)}: use https://, or set "
            "allow_insecure_http = true for this backend to accept that anyone on the "
            "network path can read the key",
            key=f"backends.{backend.name}.url",
        )


def store_api_key(name: str, key: str) -> None:
    import keyring
    import keyring.errors

    if not key.strip():
        raise ConfigError("an empty API key was not stored")
    try:
        keyring.set_password(KEYRING_SERVICE, name, key.strip())
    except keyring.errors.KeyringError as exc:
        raise ConfigError(
            f"the system keyring refused the key ({exc}); set the backend's environment "
            "variable instead (see key_env in the configuration)"
        ) from exc


def delete_api_key(name: str) -> bool:
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(KEYRING_SERVICE, name)
    except keyring.errors.PasswordDeleteError:
        return False
    except keyring.errors.KeyringError as exc:
        raise ConfigError(f"the system keyring failed: {exc}") from exc
    return True

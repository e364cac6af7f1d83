"""API keys: the system keyring first, then an environment variable, never the TOML file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from anyfill.config.model import BackendConfig, is_loopback, url_host
from anyfill.daemon.errors import ConfigError, NeedsKeyError

KEYRING_SERVICE = "anyfill"

BROKER_PASSWORD_ENV = "ANYFILL_MQTT_PASSWORD"
INSERT_KEY_ENV = "ANYFILL_MQTT_INSERT_KEY"

__all__ = [
    "BROKER_PASSWORD_ENV",
    "INSERT_KEY_ENV",
    "KEYRING_SERVICE",
    "KeyStatus",
    "delete_api_key",
    "key_status",
    "load_keyring",
    "move_api_key",
    "refuse_clear_text",
    "resolve_api_key",
    "resolve_broker_password",
    "resolve_insert_key",
    "store_api_key",
]


def load_keyring() -> None:
    """Load the keyring's backend now (it scans every installed backend, ~80 ms), so the
    first lookup does not; a keyring that cannot load is left for that lookup to report."""
    import keyring

    with contextlib.suppress(Exception):
        keyring.get_keyring()


def _keyring_get(name: str) -> str | None:
    import keyring
    import keyring.errors

    try:
        return keyring.get_password(KEYRING_SERVICE, name)
    except (keyring.errors.KeyringError, OSError):
        # No keyring daemon (common on bare Linux sessions), or a backend forced with
        # PYTHON_KEYRING_BACKEND whose bus is gone (OSError): the env var still works.
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
        refuse_clear_text(backend)
        return key
    if not backend.needs_key:
        return None
    fixes = f"run 'anyfill config set-key {backend.name}' to store it in the system keyring"
    if env_var:
        fixes += f", or set the environment variable {env_var}"
    else:
        fixes += ", or name an environment variable that holds it with key_env"
    raise NeedsKeyError(f"backend '{backend.name}' needs an API key: {fixes}")


def refuse_clear_text(backend: BackendConfig) -> None:
    """A key never travels unencrypted past this machine unless the user said so.

    The one rule for every key: ``create_backend`` applies it to whatever key a backend is
    built with (the keyring's, the environment's, or one typed in the panel and tried
    before it is saved); :func:`resolve_api_key` applies it too, so that ``doctor`` and
    ``complete`` name it before any backend is built."""
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
    except (keyring.errors.KeyringError, OSError) as exc:
        # OSError: a keyring file on a full disk (ENOSPC), a bus that went away.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(
            f"the system keyring refused the key for '{name}' ({reason or type(exc).__name__});"
            " set the backend's environment variable instead (see key_env in the configuration)"
        ) from exc


def delete_api_key(name: str) -> bool:
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(KEYRING_SERVICE, name)
    except keyring.errors.PasswordDeleteError:
        return False
    except (keyring.errors.KeyringError, OSError) as exc:
        raise ConfigError(f"the system keyring failed: {exc}") from exc
    return True


def move_api_key(old_name: str, new_name: str) -> bool:
    """A renamed backend keeps its key: move the keyring entry unless the new name has one."""
    key = _keyring_get(old_name)
    if not key or _keyring_get(new_name):
        return False
    store_api_key(new_name, key)
    delete_api_key(old_name)
    return True


@dataclass(frozen=True)
class KeyStatus:
    """Where a backend's key would come from, for the settings panel; never the key itself."""

    in_keyring: bool
    env_var: str
    """The environment variable consulted ('' when the type has none)."""
    env_set: bool
    keyring_error: str = ""
    """Why the keyring could not be asked (no keyring daemon), '' when it answered."""

    def describe(self) -> str:
        if self.in_keyring:
            text = "a key is stored in the system keyring"
            if self.env_set:
                text += f" (it takes precedence over ${self.env_var})"
            return text
        if self.env_set:
            return f"the key comes from the environment variable ${self.env_var}"
        if self.keyring_error:
            return f"the system keyring is unavailable ({self.keyring_error})"
        return "no key stored" + (f" and ${self.env_var} is not set" if self.env_var else "")


def key_status(backend: BackendConfig, environ: Mapping[str, str] | None = None) -> KeyStatus:
    import keyring
    import keyring.errors

    environ = os.environ if environ is None else environ
    env_var = backend.api_key_env
    env_set = bool(env_var and environ.get(env_var))
    try:
        stored = keyring.get_password(KEYRING_SERVICE, backend.name)
    except keyring.errors.KeyringError as exc:
        return KeyStatus(False, env_var, env_set, keyring_error=str(exc) or type(exc).__name__)
    return KeyStatus(bool(stored), env_var, env_set)


def _keyring_or_env(key_name: str, env_var: str, environ: Mapping[str, str] | None) -> str | None:
    environ = os.environ if environ is None else environ
    if key_name:
        value = _keyring_get(key_name)
        if value:
            return value
    return environ.get(env_var) or None


def resolve_insert_key(key_name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The secret remote insert requests are signed with: keyring entry ``key_name``,
    else ``ANYFILL_MQTT_INSERT_KEY``."""
    return _keyring_or_env(key_name, INSERT_KEY_ENV, environ)


def resolve_broker_password(key_name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The MQTT broker password: keyring entry ``key_name``, else ``ANYFILL_MQTT_PASSWORD``."""
    return _keyring_or_env(key_name, BROKER_PASSWORD_ENV, environ)

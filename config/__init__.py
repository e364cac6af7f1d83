"""anyfill's settings: pydantic models, the TOML file and API keys. Never imports Qt."""

from anyfill.config.model import SCHEMA_VERSION, BackendConfig, Settings
from anyfill.config.secrets import resolve_api_key
from anyfill.config.store import default_config_path, load_settings

__all__ = [
    "SCHEMA_VERSION",
    "BackendConfig",
    "Settings",
    "default_config_path",
    "load_settings",
    "resolve_api_key",
]

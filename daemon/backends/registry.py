"""Config ``type`` -> backend class, and building a backend from its config."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import httpx

from anyfill.config.model import BACKEND_TYPES, BackendConfig, ModelsConfig
from anyfill.daemon.backends.anthropic import AnthropicBackend
from anyfill.daemon.backends.base import Backend
from anyfill.daemon.backends.gemini import GeminiBackend
from anyfill.daemon.backends.llamacpp import LlamaCppBackend
from anyfill.daemon.backends.mistral_fim import MistralFimBackend
from anyfill.daemon.backends.ollama import OllamaBackend
from anyfill.daemon.backends.openai_chat import OpenAIChatBackend
from anyfill.daemon.backends.openai_completions import OpenAICompletionsBackend
from anyfill.daemon.bus import EventBus
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
from anyfill.daemon.mqtt.pool_backend import MqttPoolBackend

__all__ = ["BACKEND_CLASSES", "backend_class", "create_backend"]

BACKEND_CLASSES: Mapping[str, type[Backend]] = MappingProxyType(
    {
        cls.type_name: cls
        for cls in (
            LlamaCppBackend,
            ManagedLlamaCppBackend,
            OllamaBackend,
            OpenAICompletionsBackend,
            MistralFimBackend,
            OpenAIChatBackend,
            AnthropicBackend,
            GeminiBackend,
            MqttPoolBackend,
        )
    }
)

assert set(BACKEND_CLASSES) == set(BACKEND_TYPES), "every config type needs a backend class"


def backend_class(type_name: str) -> type[Backend]:
    try:
        return BACKEND_CLASSES[type_name]
    except KeyError:
        raise ConfigError(
            f"unknown backend type {type_name!r}; known types: {', '.join(BACKEND_TYPES)}",
            key="type",
        ) from None


def create_backend(
    config: BackendConfig,
    client: httpx.AsyncClient,
    api_key: str | None = None,
    *,
    bus: EventBus | None = None,
    models: ModelsConfig | None = None,
) -> Backend:
    """The backend for ``config``; a managed one publishes its server's state on ``bus``
    and finds its model with ``models``."""
    cls = backend_class(config.type)
    if cls is ManagedLlamaCppBackend:
        return ManagedLlamaCppBackend(config, client, api_key, bus=bus, models=models)
    return cls(config, client, api_key)

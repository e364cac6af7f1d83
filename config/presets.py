"""Starting points for the common servers: the settings panel fills a backend from one.

A preset is data only: type, URL, model and key variable as the server's documentation
gives them (see docs/backends.md). The user can change every field afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from anyfill.config.model import MANAGED_DEFAULT_URL, BackendConfig, BackendType

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    label: str
    name: str
    """The backend name the preset suggests (made unique by the panel)."""
    type: BackendType
    url: str
    model: str = ""
    key_env: str = ""
    note: str = ""

    def backend(self, name: str | None = None) -> BackendConfig:
        return BackendConfig(
            name=name or self.name,
            type=self.type,
            url=self.url,
            model=self.model,
            key_env=self.key_env,
        )


PRESETS: tuple[Preset, ...] = (
    Preset(
        "llama.cpp server (local, :8080)",
        "llamacpp",
        "llamacpp",
        "http://127.0.0.1:8080",
        note="llama-server with a FIM model, e.g. llama-server --fim-qwen-1.5b-default",
    ),
    Preset(
        "Ollama (local, :11434)",
        "ollama",
        "ollama",
        "http://127.0.0.1:11434",
        model="qwen2.5-coder:1.5b-base",
        note="FIM needs a base model tag, not an instruct one",
    ),
    Preset(
        "Mistral Codestral",
        "codestral",
        "mistral-fim",
        "https://codestral.mistral.ai",
        model="codestral-latest",
        note="a Codestral key; a La Plateforme key needs https://api.mistral.ai",
    ),
    Preset(
        "DeepSeek (FIM beta)",
        "deepseek",
        "openai-completions",
        "https://api.deepseek.com/beta",
        model="deepseek-chat",
        key_env="DEEPSEEK_API_KEY",
    ),
    Preset(
        "OpenAI (chat models)",
        "openai",
        "openai-chat",
        "https://api.openai.com",
        model="gpt-4.1-mini",
        note="chat models answer through an infill prompt",
    ),
    Preset(
        "vLLM server (local, :8000)",
        "vllm",
        "openai-completions",
        "http://127.0.0.1:8000",
        model="Qwen/Qwen2.5-Coder-1.5B",
    ),
    Preset(
        "LiteLLM gateway (:4000)",
        "litellm",
        "openai-completions",
        "http://127.0.0.1:4000",
        key_env="LITELLM_API_KEY",
        note="the model name is the gateway's model alias",
    ),
    Preset(
        "llama.cpp run by anyfill (nothing to install)",
        "managed",
        "llamacpp-managed",
        MANAGED_DEFAULT_URL,
        note="anyfill starts llama-server itself with the model 'anyfill model use' picked",
    ),
)

"""Local servers the user never set up: absent is fine, when a managed server follows.

The default chain tries llama.cpp on :8080 and Ollama on :11434 before the server anyfill
runs itself. A user who runs neither has nothing to fix when nothing listens there: the
tray then neither notifies "fix needed" nor says such a backend is cooling down, as
``anyfill doctor`` says "none needed" (``doctor.checks``). A backend the user changed or
added, or one with no managed server after it, is not quiet.
"""

from __future__ import annotations

from anyfill.config.model import Settings

__all__ = ["LOCAL_TYPES", "quiet_when_absent"]

LOCAL_TYPES = ("llamacpp", "ollama")


def quiet_when_absent(settings: Settings) -> frozenset[str]:
    """Names of the default local backends, as shipped, that come before a managed one."""
    defaults = {backend.name: backend for backend in Settings().backends}
    chain = settings.routing.default
    managed = [
        i
        for i, name in enumerate(chain)
        if settings.backend(name).type == "llamacpp-managed" and settings.backend(name).enabled
    ]
    if not managed:
        return frozenset()
    return frozenset(
        name
        for name in chain[: managed[-1]]
        if settings.backend(name).type in LOCAL_TYPES
        and defaults.get(name) == settings.backend(name)
    )

"""What the chat backends (OpenAI chat, Anthropic, Gemini) share: the infill prompt."""

from __future__ import annotations

from anyfill.daemon.backends.base import FimPrompt, Plan
from anyfill.daemon.backends.common import limit_stops
from anyfill.daemon.fim.chat import CHAT_STOP, ChatPrompt, build_chat_prompt

__all__ = ["chat_plan", "chat_prompt"]


def chat_prompt(prompt: FimPrompt) -> ChatPrompt:
    return build_chat_prompt(
        prompt.prefix,
        prompt.suffix,
        language=prompt.language,
        single_line=prompt.single_line,
        extra=prompt.extra,
        filename=prompt.filename,
    )


def chat_plan(prompt: FimPrompt, config_stops: list[str]) -> Plan:
    """Chat answers are parsed out of the answer tag; its closing tag is the stop."""
    return Plan(
        mode="chat", stop=tuple(limit_stops([*CHAT_STOP, *prompt.stop, *config_stops], None))
    )

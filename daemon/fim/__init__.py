"""anyfill.daemon.fim: model templates, chat infill and the exact-middle cleaner (pure logic).

- :mod:`.templates`: byte-exact FIM templates and stop strings per model family, detection.
- :mod:`.chat`: the infill prompt for chat-only models and the extraction of their answer.
- :mod:`.postprocess`: :func:`clean`, the pipeline that returns exactly the missing text.
"""

from anyfill.daemon.fim.chat import CHAT_STOP, ChatPrompt, build_chat_prompt, extract_middle
from anyfill.daemon.fim.postprocess import clean, wants_single_line
from anyfill.daemon.fim.templates import (
    TEMPLATES,
    FimTemplate,
    detect_template,
    get_template,
    template_from_tokens,
)

__all__ = [
    "CHAT_STOP",
    "TEMPLATES",
    "ChatPrompt",
    "FimTemplate",
    "build_chat_prompt",
    "clean",
    "detect_template",
    "extract_middle",
    "get_template",
    "template_from_tokens",
    "wants_single_line",
]

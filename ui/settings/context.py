"""Context beyond the caret: which sources are sent, and what each backend receives.

Self-contained (docs/context.md is the reference): the switches of ``[context]`` and a
summary, kept up to date with the draft, of what the configured backends would receive.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import Form

#: Where each backend type puts the context (docs/context.md, "What each backend receives").
PLACES = {
    "llamacpp": "input_extra (llama.cpp's own field)",
    "llamacpp-managed": "input_extra (llama.cpp's own field)",
    "openai-chat": "the chat prompt, before the document",
    "anthropic": "the chat prompt, before the document",
    "gemini": "the chat prompt, before the document",
    "ollama": "nothing (its suffix API has no field), unless a template with file tokens is set",
    "openai-completions": "nothing, unless a template with file tokens is set",
    "mistral-fim": "nothing (the FIM API has no field for it)",
    "mqtt": "whatever the remote worker's backend takes",
}
FILE_TOKEN_TEMPLATES = frozenset({"starcoder", "deepseek", "codestral", "qwen-repo", "codegeex4"})


def summary(data: dict[str, Any]) -> str:
    """What is sent, in words, for the settings ``data`` (the draft's dict)."""
    context = data["context"]
    if not context["enabled"]:
        return "Nothing beyond the text around the caret is sent."
    sources = []
    if context["title"]:
        sources.append("the application name and window title (not for terminals)")
    if context["fields"]:
        sources.append("the window's other text fields (never password fields)")
    if context["accepted"]:
        sources.append("completions you accepted in the same application")
    if context["clipboard"]:
        sources.append("recent clipboard text (never single words or a password's copy)")
    if not sources:
        return "Nothing beyond the text around the caret is sent."
    lines = [f"Sent with each request, up to {context['max_chars']} characters:"]
    lines += [f"• {source}" for source in sources]
    lines.append("Never for password managers or password fields.")
    lines.append("Your backends receive it as:")
    for backend in data["backends"]:
        if not backend.get("enabled", True):
            continue
        kind = backend["type"]
        place = PLACES.get(kind, "nothing")
        if kind in ("ollama", "openai-completions") and backend.get("template") in (
            FILE_TOKEN_TEMPLATES
        ):
            place = f"the '{backend['template']}' template's file tokens"
        lines.append(f"• {backend['name']}: {place}")
    return "\n".join(lines)


class ContextPage(QWidget):
    title = "Context"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.draft = draft
        form = Form(draft, ("context",))
        form.section("Context beyond the caret")
        form.check("Send related text with the text around the caret", ["enabled"])
        form.check("The application name and window title", ["title"])
        form.check("The window's other text fields", ["fields"])
        form.check("Completions accepted in the same application", ["accepted"])
        form.check("Recent clipboard text", ["clipboard"])
        form.integer("At most", ["max_chars"], suffix=" chars")
        form.integer("Chunks kept", ["max_chunks"])
        form.integer("Lines per chunk", ["chunk_lines"])
        form.text_list("Terminals (no title sent)", ["terminals"])
        form.text_list("Password managers (nothing sent)", ["password_managers"])
        form.note(
            "Each source can be turned off per application with a rule on the "
            "Applications page. The log holds none of it unless you log text (Privacy)."
        )
        self.form = form
        self.sent = QLabel()
        self.sent.setWordWrap(True)
        self.sent.setAccessibleName("What is sent")
        body = QWidget()
        inner = QVBoxLayout(body)
        inner.addWidget(form)
        inner.addWidget(QLabel("<b>What is sent</b>"))
        inner.addWidget(self.sent)
        inner.addStretch()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        draft.changed.connect(self.refresh)
        draft.reloaded.connect(self.refresh)
        form.refresh()
        self.refresh()

    def refresh(self) -> None:
        self.sent.setText(summary(self.draft.data))

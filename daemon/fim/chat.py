"""Infill through chat-only models (Claude, GPT chat models, Gemini).

Chat models are not trained on FIM tokens, so the document goes in as text with the hole
marked, and the model is told to answer with only the hole's text inside a tag. The prompt
ends with the user's message: current Claude models reject an assistant prefill, so nothing
is put in the model's mouth. The reply is then parsed by :func:`extract_middle`, which
tolerates what chat models add anyway (fences, "Here is..." preambles, ``<think>`` blocks).

The prompt goes out on every hotkey press, so it stays short: two tiny examples, no more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from anyfill.daemon.fim.textfix import (
    fenced_blocks,
    strip_fence,
    strip_preamble,
    strip_think,
    unwrap_block,
)

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "CHAT_STOP",
    "HOLE",
    "ChatPrompt",
    "build_chat_prompt",
    "extract_middle",
]

HOLE = "<|HOLE|>"
"""Marks the caret in the document sent to the model."""
ANSWER_OPEN = "<fill>"
ANSWER_CLOSE = "</fill>"
CHAT_STOP: tuple[str, ...] = (ANSWER_CLOSE,)
"""Stop strings for chat backends: the model is done once it closes the answer tag."""

_SYSTEM = f"""\
You fill the hole in a document. The user sends the document between <document> tags with \
the hole marked {HOLE}. Reply with exactly the text that belongs at {HOLE}, wrapped as \
{ANSWER_OPEN}TEXT{ANSWER_CLOSE}, and nothing else: no explanation, no code fences, no {HOLE}.
Rules:
- Never repeat text that is already before or after the hole; start where the text before \
stops and end where the text after begins.
- Keep the document's language, style and indentation; include spaces or newlines at the \
edges only when they belong in the hole.
- If nothing is missing, reply {ANSWER_OPEN}{ANSWER_CLOSE}.
Examples:
<document>def area(r):
    return {HOLE} * r ** 2
</document>
{ANSWER_OPEN}math.pi{ANSWER_CLOSE}
<document>The capital of France is {HOLE}, on the Seine.</document>
{ANSWER_OPEN}Paris{ANSWER_CLOSE}"""

_SINGLE_LINE = "\n- The answer must fit on the current line: no line breaks."
_CONTEXT_RULE = (
    "\n- Text between <context> tags before the document is related text (other fields of "
    "the window, earlier text of the user): use it to understand the document, never copy "
    "it unless it belongs in the hole."
)


@dataclass(frozen=True)
class ChatPrompt:
    """A system instruction and one user message; send both, prefill nothing."""

    system: str
    user: str
    marker: str = HOLE
    """The hole marker used (another one when the document itself contains ``HOLE``)."""


def build_chat_prompt(
    prefix: str,
    suffix: str,
    *,
    language: str = "",
    single_line: bool = False,
    extra: Sequence[tuple[str, str]] = (),
    filename: str = "",
) -> ChatPrompt:
    """The chat request that asks for the text between ``prefix`` and ``suffix``.

    ``extra`` (name, text) chunks go before the document as ``<context name="...">`` blocks,
    ``filename`` as the document's name: chat models have no field of their own for them.
    """
    marker = _free_marker(prefix + suffix + "".join(text for _, text in extra))
    system = _SYSTEM
    rules = (_SINGLE_LINE if single_line else "") + (_CONTEXT_RULE if extra else "")
    if rules:
        system = system.replace("\nExamples:", f"{rules}\nExamples:", 1)
    if language:
        system += f"\nThe document is {language}."
    if marker != HOLE:
        system = system.replace(HOLE, marker)
    blocks = "".join(
        f'<context name="{_attribute(name)}">{text}</context>\n' for name, text in extra
    )
    named = f' name="{_attribute(filename)}"' if filename else ""
    user = f"{blocks}<document{named}>{prefix}{marker}{suffix}</document>"
    return ChatPrompt(system=system, user=user, marker=marker)


def _attribute(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("\n", " ")


def _free_marker(document: str) -> str:
    """HOLE, or a numbered variant when the document already contains it."""
    marker, n = HOLE, 0
    while marker in document:
        n += 1
        marker = f"<|HOLE{n}|>"
    return marker


_ANY_MARKER = re.compile(r"<\|HOLE\d*\|>")


def extract_middle(answer: str, *, marker: str | None = None) -> str:
    """The hole's text out of a chat reply; empty rather than wrong when it cannot tell.

    Accepts ``<fill>X</fill>`` anywhere in the reply (after a ``<think>`` block or a
    preamble, inside a fence, after a sentence that mentions the tag), an unclosed
    ``<fill>X`` (the backend stopped at ``</fill>``), a reply with one fenced block and prose
    around it (several blocks: ""), or a plain answer. A
    reply that contains the hole marker re-quoted the document instead of filling it, so it
    yields "" (``marker``: the prompt's marker; by default any spelling
    :func:`build_chat_prompt` may have used). Pass the result on to
    :func:`anyfill.daemon.fim.postprocess.clean`, which removes text the model repeated
    from around the hole.
    """
    text = strip_think(answer)
    close = text.find(ANSWER_CLOSE)
    opening = text.rfind(ANSWER_OPEN, 0, close if close != -1 else len(text))
    if opening != -1:
        end = close if close != -1 else len(text)
        middle = strip_fence(unwrap_block(text[opening + len(ANSWER_OPEN) : end]))
    else:
        # No tag: a chat reply that talks around one code block means the block; with
        # several blocks there is no telling which.
        blocks = fenced_blocks(text)
        if len(blocks) > 1:
            return ""
        middle = blocks[0] if blocks else strip_preamble(text.strip("\n"))
        middle = middle.removesuffix(ANSWER_CLOSE)
    if (marker in middle) if marker is not None else _ANY_MARKER.search(middle):
        return ""
    return middle

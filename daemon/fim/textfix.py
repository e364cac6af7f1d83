"""Removing the wrapping that models put around an answer: think blocks, tags, fences, preambles.

Each function changes its input only when the wrapping is unmistakable (it encloses the
whole answer, or opens it), so an answer without wrapping passes through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "FORMAT_TAGS",
    "cut_at_tokens",
    "fenced_blocks",
    "strip_fence",
    "strip_format_tags",
    "strip_preamble",
    "strip_think",
    "unwrap_block",
]

_THINK = re.compile(r"\A\s*<(think|thinking|reasoning)>.*?</\1>(\n\n|\n)?", re.S)
_THINK_OPEN = re.compile(r"\A\s*<(think|thinking|reasoning)>", re.S)


def strip_think(text: str) -> str:
    """Drop a reasoning block that opens the answer (Qwen3, DeepSeek-R1 style).

    The block's own separator (``</think>\\n\\n``, the format those models emit) goes with
    it. An unclosed block means the model never got to the answer: nothing is left.
    """
    match = _THINK.match(text)
    if match is not None:
        return text[match.end() :]
    if _THINK_OPEN.match(text):
        return ""
    return text


FORMAT_TAGS: tuple[str, ...] = ("COMPLETION", "fill", "CODE5711", "MIDDLE", "middle", "answer")
"""Tags that chat prompts (ours and other clients') ask answers to be wrapped in."""

# Chat-infill markers that an answer may open with (Gemini-style prompts, Continue's hole
# filler); they carry no text. FIM tokens are not among them: at the start of an answer they
# mean an empty middle, as the server's own stop handling would have it.
_LEADING_MARKERS = ("<|fim|>", "{{FILL_HERE}}")


def strip_format_tags(text: str, document: str = "") -> str:
    """Remove an opening format tag or marker and everything from its closing tag on.

    A tag that also appears in ``document`` may be the user's own markup, so it is kept.
    """
    for marker in _LEADING_MARKERS:
        if text.startswith(marker) and marker not in document:
            text = text[len(marker) :]
    for tag in FORMAT_TAGS:
        opening, closing = f"<{tag}>", f"</{tag}>"
        if opening in document or closing in document:
            continue
        stripped = text.lstrip()
        if stripped.startswith(opening):
            text = unwrap_block(stripped[len(opening) :].split(closing, 1)[0])
        elif closing in text and opening not in text:
            # (an opening tag further in means the tag sits inside another wrapper, such as
            # a fence; the next unwrapping round deals with it)
            text = text[: text.index(closing)]
    return text


def unwrap_block(inner: str) -> str:
    """The content of a tag written block style (``<t>\nX\n</t>``): those two line breaks
    belong to the tag. Content written inline (``<t>X</t>``) is returned as is."""
    if len(inner) >= 2 and inner.startswith("\n") and inner.endswith("\n"):
        return inner[1:-1]
    return inner


def cut_at_tokens(text: str, tokens: Sequence[str]) -> str:
    """Cut ``text`` at the first occurrence of any of ``tokens`` (stop strings)."""
    cut = len(text)
    for token in tokens:
        if token:
            at = text.find(token, 0, cut)
            if at != -1:
                cut = at
    return text[:cut]


_FENCE = re.compile(r"\A\s*(`{3,}|~{3,})[^\n`]*\n(.*?)\n?\1[ \t]*\n?\s*\Z", re.S)


def strip_fence(text: str) -> str:
    """Unwrap an answer that is one fenced code block: ```` ```lang\\nX\\n``` ```` -> ``X``.

    The newline before the closing fence belongs to the fence (that is how models write a
    block), so ``X`` loses nothing of its own.
    """
    match = _FENCE.match(text)
    if match is None:
        return text
    inner = match.group(2)
    if match.group(1) in inner:
        return text  # several blocks, or prose around them: not one wrapped answer
    return inner


_FENCED_BLOCK = re.compile(r"^(`{3,}|~{3,})[^\n`]*\n(.*?)\n?^\1[ \t]*$", re.S | re.M)


def fenced_blocks(text: str) -> list[str]:
    """The contents of the fenced code blocks in ``text``, prose around them allowed."""
    return [str(content) for _fence, content in _FENCED_BLOCK.findall(text)]


_PREAMBLE = re.compile(
    r"""\A[ \t]*
    (?:sure|certainly|of\ course|okay|ok|here\ is|here's|here\ are|below\ is
      |the\ (?:missing|completed?))
    [^\n]{0,160}?
    (?:[:.!])[ \t]*\n""",
    re.I | re.X,
)
# Words about the task rather than the document ("missing invoice" is content, "missing
# code" is talk about the answer).
_PREAMBLE_TOPIC = re.compile(
    r"""\b(?:completion|fill(?:ed)?|hole|middle|insert(?:ed|ion)?|belongs
    |goes\ (?:in|there|here|at)
    |(?:missing|completed?)\ (?:code|text|part|words?|lines?|piece|content|snippet|portion))\b""",
    re.I | re.X,
)


def strip_preamble(text: str) -> str:
    """Drop an opening sentence like "Here is the missing code:" that talks *about* the answer.

    Only a first line that starts like such a sentence and either is followed by a fence or
    ends with ``:`` and speaks about the task (missing, completion, fill, hole...) is
    removed; an answer that merely starts with "Sure" stays.
    """
    match = _PREAMBLE.match(text)
    if match is None:
        return text
    rest = text[match.end() :]
    line = match.group(0)
    if rest.lstrip().startswith(("```", "~~~")):
        return rest.lstrip("\n")
    if _PREAMBLE_TOPIC.search(line) and line.rstrip().endswith(":"):
        return rest
    return text

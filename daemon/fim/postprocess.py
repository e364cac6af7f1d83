"""The exact middle: turn whatever a backend returned into the text that belongs at the caret.

:func:`clean` runs a fixed pipeline (order matters; docs/fim.md shows one example per step):

1. unwrap, repeated until nothing changes: a leading ``<think>`` block, format tags and
   markers, stop strings and leaked special tokens of any family, an opening "Here is..."
   sentence, one fenced block around the whole answer;
2. drop an echo of the text before the caret (the current line, or the whole document);
3. drop the end that repeats the start of the suffix (bracket/quote balance decides, or
   evidence: the whole rest of the line, or enough characters), and cut where the answer
   starts writing the lines that already follow the caret; in single-line mode these run
   on the whole answer before the first line is kept, and again on that line;
4. when step 3 cut the rest of the caret's line from a one-line answer, the model rewrote
   the whole line: its start is dropped too, even the one or two characters step 2 keeps;
5. drop a final line break that would make more blank lines than the document has;
6. keep one round of a line or block that the answer repeats to its end (a runaway loop);
7. drop control characters (terminal escapes, NUL, bidi overrides, U+2028...) that the
   document does not hold itself (``controls.strip_controls``).

Every rule compares with the document exactly and fires only on unmistakable patterns, so
an answer that is already clean comes back unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from anyfill.daemon.fim.controls import strip_controls
from anyfill.daemon.fim.overlap import (
    trim_extra_newlines,
    trim_following_lines,
    trim_prefix_echo,
    trim_rewritten_line_start,
    trim_suffix_echo,
)
from anyfill.daemon.fim.repetition import trim_repetition
from anyfill.daemon.fim.templates import ALL_SPECIAL_TOKENS, GENERIC_TOKENS
from anyfill.daemon.fim.textfix import (
    cut_at_tokens,
    strip_fence,
    strip_format_tags,
    strip_preamble,
    strip_think,
)

__all__ = ["SingleLineSetting", "clean", "wants_single_line"]

SingleLineSetting = Literal["auto", "always", "never"]

_MAX_UNWRAP = 4


def clean(
    raw: str,
    prefix: str,
    suffix: str,
    *,
    stop: Sequence[str] = (),
    single_line: bool = False,
    family_known: bool = True,
) -> str:
    """The exact text to insert between ``prefix`` and ``suffix`` for the answer ``raw``.

    ``family_known=False`` (a server's native FIM with a model anyfill cannot name): the
    short generic sentinels (``<EOT>``, ``<eos>``, ``[SUFFIX]``...) are stops too.
    """
    document = prefix + suffix
    # A token the document itself contains (someone editing a FIM template) may belong in
    # the answer too; the template's own stops are cut regardless, as the server would.
    writes_tokens = any(token in document for token in ALL_SPECIAL_TOKENS)
    tokens = tuple(stop) if writes_tokens else (*stop, *ALL_SPECIAL_TOKENS)
    if not family_known:  # each generic sentinel, unless the document has that very text
        tokens = (*tokens, *(token for token in GENERIC_TOKENS if token not in document))
    fenced_document = "```" in document or "~~~" in document
    text = raw
    for _ in range(_MAX_UNWRAP):
        before = text
        text = strip_think(text)
        text = strip_format_tags(text, document)
        text = cut_at_tokens(text, tokens)
        if not fenced_document:
            text = strip_preamble(text)
            text = strip_fence(text)
        if text == before:
            break
    text = trim_prefix_echo(text, prefix, suffix)
    answer = text
    if single_line:
        # The overrun checks first: the repeated next line that proves an overrun is in the
        # lines the first-line cut throws away.
        text = _trim_overruns(text, prefix, suffix).split("\n", 1)[0]
    text = _trim_overruns(text, prefix, suffix)
    text = trim_rewritten_line_start(answer, text, prefix, suffix)
    text = trim_extra_newlines(text, prefix, suffix)
    return strip_controls(trim_repetition(text), document)


def _trim_overruns(text: str, prefix: str, suffix: str) -> str:
    # An exact echo of the suffix's start is the more precise reading, so it goes first:
    # "the" before "the.\nthe." is the suffix again, not a start of its second line.
    text = trim_suffix_echo(text, prefix, suffix)
    return trim_following_lines(text, prefix, suffix)


_ONE_LINE_STARTS = re.compile(r"[ \t]*(?:#|//|--\s|[-*>]\s|\d+[.)]\s)")
"""Comment lines and Markdown list/quote items: their continuation is the rest of the line."""


def wants_single_line(prefix: str, suffix: str, setting: SingleLineSetting) -> bool:
    """Whether to complete only the current line.

    ``auto``: yes when non-blank text follows the caret on its line (the answer has to fit
    before it), or when the line is a comment or a Markdown list or quote item.
    """
    if setting != "auto":
        return setting == "always"
    rest_of_line = suffix.split("\n", 1)[0]
    if rest_of_line.strip():
        return True
    current = prefix[prefix.rfind("\n") + 1 :]
    return _ONE_LINE_STARTS.match(current) is not None

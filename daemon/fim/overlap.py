"""Where an answer repeats the document around the hole, and how to cut the repetition.

Models that see the text after the caret often write it again (the end of the line, the next
lines), and some repeat the start of the current line. These functions find such echoes by
exact comparison with the document; the only judgement call, whether text that equals the
start of the suffix is an echo or the answer's own (``foo(bar)`` before a ``)``), is made by
checking which reading leaves the brackets and quotes balanced.
"""

from __future__ import annotations

import re

__all__ = [
    "imbalance",
    "trim_extra_newlines",
    "trim_following_lines",
    "trim_prefix_echo",
    "trim_rewritten_line_start",
    "trim_suffix_echo",
]

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(_OPEN.values())
_QUOTES = frozenset("\"'`")
_WINDOW = 2000
"""Characters of context on each side used by the balance check."""
_MAX_CANDIDATES = 16
_MIN_ECHO = 3
"""Non-space characters a prefix echo needs: shorter ones are too likely to be real text."""
_NEWLINE = re.compile("\n")
_INDENT = re.compile(r"[ \t]*")


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def imbalance(text: str) -> int:
    """How many brackets and quotes in ``text`` have no partner.

    Strings end at their closing quote or at the end of the line (an unterminated string
    counts once); brackets inside strings are ignored. ``'`` between two letters is an
    apostrophe ("don't"), not a quote.
    """
    stack: list[str] = []
    errors = 0
    quote = ""
    escaped = False
    for i, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            elif char == "\n" and quote != "`":
                errors += 1
                quote = ""
            continue
        if char in _QUOTES:
            between_letters = (
                char == "'"
                and 0 < i < len(text) - 1
                and _is_word(text[i - 1])
                and _is_word(text[i + 1])
            )
            if not between_letters:
                quote = char
        elif char in _OPEN:
            stack.append(_OPEN[char])
        elif char in _CLOSE:
            if stack and stack[-1] == char:
                stack.pop()
            else:
                errors += 1
    return errors + len(stack) + (1 if quote else 0)


def _window(prefix: str, suffix: str) -> tuple[str, str]:
    """The prefix from a line start and the suffix to a line end, about _WINDOW chars each."""
    before = prefix[-_WINDOW:]
    if len(before) < len(prefix):
        before = before[before.find("\n") + 1 :]
    after = suffix[:_WINDOW]
    if len(after) < len(suffix) and "\n" in after:
        after = after[: after.rfind("\n")]
    return before, after


def _ends_inside_word(text: str, k: int) -> bool:
    """Whether ``text[:k]`` stops in the middle of a word of ``text``."""
    return 0 < k < len(text) and _is_word(text[k - 1]) and _is_word(text[k])


def _first_line(suffix: str) -> str:
    return suffix.split("\n", 1)[0].rstrip("\r")


def _splits_run(middle: str, echo: str) -> bool:
    """Whether cutting ``echo`` off ``middle`` would split a run of one non-space character
    (the quotes opening a docstring, ``#####`` of a banner): such runs say little about
    repeats."""
    k = len(echo)
    return k < len(middle) and middle[-k - 1] == echo[0] and not echo[0].isspace()


def _quote_run(middle: str, echo: str) -> bool:
    """Cutting would split a run of quotes (``""`` + ``"`` opens a docstring)."""
    return echo[0] in _QUOTES and _splits_run(middle, echo)


def _is_evidence(middle: str, suffix: str, k: int) -> bool:
    """Whether an overlap of ``k`` characters between the end of ``middle`` and the start
    of ``suffix`` is a repeat rather than a coincidence: the whole first line of the suffix,
    or whole words with three letters or digits at least. ``addres`` before ``s)`` is a
    word being finished, not an echo; ``pas`` before ``s`` neither."""
    echo = suffix[:k]
    starts_word = k == len(middle) or not (_is_word(middle[-k - 1]) and _is_word(echo[0]))
    line = _first_line(suffix)
    if k >= len(line):
        banner = len(set(line.strip())) == 1 and _splits_run(middle, echo)
        return not banner and (starts_word or len(line.strip()) >= 2)
    if _splits_run(middle, echo):
        return False
    letters = sum(char.isalnum() for char in echo)
    return letters >= _MIN_ECHO and starts_word and not _ends_inside_word(suffix, k)


def trim_suffix_echo(middle: str, prefix: str, suffix: str) -> str:
    """Remove the end of ``middle`` that repeats the start of ``suffix``.

    Seed case: after ``print("Hel`` and before ``)``, the answer ``lo World")`` ends with the
    ``)`` that is already there, so it becomes ``lo World"``. Among the candidate overlaps the
    one that leaves the fewest unbalanced brackets and quotes wins. When cutting does not
    improve the balance, only evidence of a repeat cuts (``_is_evidence``: the whole first
    line of the suffix, or whole words), so ``addres``
    before ``s)`` stays whole. Whitespace-only overlaps are left to ``trim_extra_newlines``.
    """
    limit = min(len(middle), len(suffix))
    candidates = [
        k for k in range(limit, 0, -1) if middle.endswith(suffix[:k]) and suffix[:k].strip()
    ]
    if not candidates:
        return middle
    # Only the longest few matter (the echo is the longest one unless the answer's own end
    # overlaps too); this bounds the work on repetitive text such as "aaaa".
    candidates = [k for k in candidates[:_MAX_CANDIDATES] if not _quote_run(middle, suffix[:k])]
    if not candidates:
        return middle
    evident = [k for k in candidates if _is_evidence(middle, suffix, k)]
    line = _first_line(suffix)
    if evident and evident[0] >= len(line) and len(line.strip()) >= _MIN_ECHO:
        # The model wrote the rest of the caret's line again: no balance can argue with that.
        return middle[: -evident[0]]
    before, after = _window(prefix, suffix)
    keep = imbalance(before + middle + after)
    scores = {k: imbalance(before + middle[:-k] + after) for k in candidates}
    best = min(scores.values())
    if best < keep:
        k = max(k for k, score in scores.items() if score == best)
        return middle[:-k]
    ties = [k for k in evident if scores[k] <= keep]
    if ties:
        return middle[: -max(ties)]
    return middle


def trim_extra_newlines(middle: str, prefix: str, suffix: str) -> str:
    """Drop the line break that ends a one-line ``middle`` when the suffix starts with one.

    ``return `` + ``x\n`` before ``\n\nprint(...)``: the model finished the caret's line
    and ended it with the break that is already there, which would add a blank line. Only
    a middle that finishes a line the caret's own text started, with text after the
    suffix's break, is trimmed: a true middle ends exactly there about once in a thousand
    random cuts of real code, a model's extra break is common.
    """
    if not (middle.endswith("\n") and suffix.startswith("\n")):
        return middle
    body = middle.rstrip("\n")
    caret_line = prefix[prefix.rfind("\n") + 1 :]
    if "\n" in body or not body.strip() or not caret_line.strip() or not suffix.strip():
        return middle
    return middle[:-1]


def _indent_at(text: str, start: int) -> int:
    match = _INDENT.match(text, start)
    return match.end() - start if match else 0


def _line_starts(text: str) -> list[int]:
    return [0, *(match.end() for match in _NEWLINE.finditer(text))]


def trim_prefix_echo(middle: str, prefix: str, suffix: str = "") -> str:
    """Remove the start of ``middle`` that repeats text before the caret.

    Recognised echoes, longest first: the whole prefix (the model re-quoted the document),
    and the prefix from any line start that includes a non-blank current line (the model
    rewrote the line or the last lines), also without the line's indentation. An echo needs
    at least three non-space characters. When the caret stands after indentation only, the
    same indentation again before the answer's first word is an echo too.
    """
    current = prefix[prefix.rfind("\n") + 1 :]
    for start in _line_starts(prefix):
        if start > 0 and not current.strip():
            continue  # caret on a blank line: only a whole-document echo is unambiguous
        indent = _indent_at(prefix, start)
        if len(prefix) - start - indent > len(middle):
            continue  # even without its indentation this line's tail is longer than the answer
        tail = prefix[start:]
        for echo in (tail, tail[indent:]) if indent else (tail,):
            if len(echo.strip()) >= _MIN_ECHO and middle.startswith(echo):
                return middle[len(echo) :]
    # The caret sits after the line's indentation and the answer indents again by exactly
    # as much before its first word: chat models re-indent the line they write. Unless the
    # two together make an indentation the lines around use: then the caret stood inside
    # the indentation and the answer finishes it.
    reindented = middle[len(current) : len(current) + 1]
    if current and not current.strip() and middle.startswith(current) and reindented.strip():
        combined = current + middle[: len(middle) - len(middle.lstrip(" \t"))]
        if combined not in _nearby_indents(prefix, suffix):
            return middle[len(current) :]
    return middle


def trim_rewritten_line_start(answer: str, middle: str, prefix: str, suffix: str) -> str:
    """Drop a short echo of the caret line's start from a model that rewrote the whole line.

    ``answer`` is the text before the suffix checks, ``middle`` after them. When they cut
    exactly the rest of the caret's line (or more) from a one-line ``middle``, the model
    wrote the line from its start to its end; the one or two characters before the caret
    that ``trim_prefix_echo`` keeps (``x`` of ``    x|``, below its three-character
    threshold) are its copy of the line's start too: ``    x`` + ``x = compute()`` before
    `` = compute()`` ... A clean answer never loses its end to the rest of the line, so this
    never fires on one.
    """
    line = _first_line(suffix)
    current = prefix[prefix.rfind("\n") + 1 :]
    if not line.strip() or not current.strip() or "\n" in middle:
        return middle
    if not (answer.startswith(middle) and answer[len(middle) :].startswith(line)):
        return middle
    # From the line start, indentation included: a middle that merely starts with the same
    # character (``"`` + ``""Docstring``) is not a rewrite of the line.
    if middle.startswith(current) and len(middle) > len(current):
        return middle[len(current) :]
    return middle


_OPENS_BLOCK = (":", "{", "(", "[", "=>", "->", "do", "then", "else")


def _nearby_indents(prefix: str, suffix: str) -> set[str]:
    """Indentations a line at the caret plausibly has: the previous and the next non-blank
    lines', and one level deeper than the previous line when it opens a block."""
    found: set[str] = set()
    before = [line for line in prefix.split("\n")[:-1][-50:] if line.strip()]
    if before:
        line = before[-1]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        found.add(indent)
        if line.rstrip().endswith(_OPENS_BLOCK):
            found.update((indent + "    ", indent + "  ", indent + "\t"))
        # A dedent goes back to a level the lines above used.
        for other in before:
            level = other[: len(other) - len(other.lstrip(" \t"))]
            if len(level) < len(indent) and indent.startswith(level):
                found.add(level)
    after = [line for line in suffix.split("\n")[1:50] if line.strip()]
    if after:
        line = after[0]
        found.add(line[: len(line) - len(line.lstrip(" \t"))])
    return found


def _nontrivial(line: str) -> bool:
    """A line that says something: a lone ``}`` or blank line may legitimately recur."""
    return any(char.isalnum() for char in line)


def trim_following_lines(middle: str, prefix: str, suffix: str) -> str:
    """Cut ``middle`` where it starts writing the lines that already follow the caret's line.

    From each line start of the answer, its lines (blank lines skipped) are compared with
    the suffix's next non-blank lines. The answer is cut there when its line equals the next
    line and has letters or digits, or when its lines all agree with the next lines to the
    end of the answer (the last may be cut short) and one of them has letters or digits.
    What the model wrote just before them that also stands in the suffix before those lines
    (the rest of the caret's line, the line break, blank lines) goes too. With the caret
    inside a line, the answer must have finished that line before the copied lines.
    """
    newline = suffix.find("\n")
    if newline == -1:
        return middle
    after = suffix[newline + 1 :]
    following = after.lstrip("\n")
    bridge = suffix[: len(suffix) - len(following)]  # rest of line + newline + blank lines
    target = following.split("\n")
    starts = _line_starts(middle)
    if not (prefix == "" or prefix.endswith("\n")):
        starts = starts[1:]
    # With the caret inside a line, the answer reaches the lines after it only by finishing
    # that line first: its own end of the line must come before the copied lines. (Else its
    # last line, which the caret's line continues, merely starts like the next line.)
    line_rest = suffix[:newline].rstrip()
    tried: set[int] = set()
    for start in starts:
        rest = middle[start:].lstrip("\n")
        content = len(middle) - len(rest)
        if not rest or content in tried:
            continue
        tried.add(content)
        finished_line = middle[:content].rstrip().endswith(line_rest)
        if (not line_rest.strip() or finished_line) and _repeats(rest.split("\n"), target):
            return _drop_bridge(middle[:content], bridge)
    return middle


def _drop_bridge(text: str, bridge: str) -> str:
    """Remove from the end of ``text`` the copy of ``bridge`` the model wrote, or at least
    the line breaks it shares with it."""
    if text.endswith(bridge):
        return text[: len(text) - len(bridge)]
    breaks = min(len(text) - len(text.rstrip("\n")), len(bridge) - len(bridge.rstrip("\n")))
    return text[: len(text) - breaks]


def _repeats(lines: list[str], following: list[str]) -> bool:
    if _nontrivial(lines[0]) and lines[0].rstrip() == following[0].rstrip():
        return True  # the next line again: whatever the model adds after it is invented
    if len(lines) > len(following):
        return False
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        target = following[i]
        if not (line.rstrip() == target.rstrip() or (last and target.startswith(line))):
            return False
    return any(_nontrivial(line) for line in lines)

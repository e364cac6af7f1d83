"""Hypothesis strategies for documents with a hole, and the predicates that say a hole is ambiguous.

Documents are code-like (indented lines of balanced expressions, string literals, comments,
calls spread over several lines) or prose-like (sentences with non-ASCII words and
apostrophes). A code document's brackets and quotes are balanced as a whole, so the true
document never misleads the bracket/quote check.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import assume
from hypothesis import strategies as st

# Words chosen so that no document starts like a chat preamble ("Sure", "Here is") or talks
# about the task ("missing", "completion"): those would be ambiguous by construction.
_ASCII_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "value",
    "total",
    "count",
    "index",
    "item",
    "name",
    "data",
    "result",
    "buffer",
    "left",
    "right",
    "node",
    "tree",
    "list",
    "map",
    "key",
    "size",
    "width",
    "height",
    "color",
    "state",
    "mode",
    "line",
    "text",
]
_UNICODE_WORDS = ["größe", "café", "naïve", "π", "变量", "データ", "ñandú", "ökonomie", "émoji✓"]
_PROSE_WORDS = [
    "the",
    "a",
    "cat",
    "sat",
    "on",
    "mat",
    "and",
    "we",
    "went",
    "to",
    "market",
    "it",
    "was",
    "sunny",
    "day",
    "but",
    "rain",
    "came",
    "later",
    "people",
    "like",
    "good",
    "food",
    "old",
    "town",
    "river",
    "bridge",
    "walk",
    "slowly",
    "home",
    "evening",
]
_PROSE_UNICODE = ["über", "café", "naïve", "façade", "日本語", "Ελλάδα", "résumé", "😀", "don't"]

identifiers = st.sampled_from(_ASCII_WORDS + _UNICODE_WORDS)
numbers = st.integers(min_value=0, max_value=9999).map(str)
string_literals = st.lists(
    st.sampled_from(_ASCII_WORDS + _UNICODE_WORDS + [" ", "!", ":", "%d"]), max_size=4
).map(lambda parts: '"' + "".join(parts) + '"')
atoms = st.one_of(identifiers, numbers, string_literals)


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    args = st.lists(children, min_size=0, max_size=3).map(", ".join)
    return st.one_of(
        st.tuples(
            children, st.sampled_from([" + ", " - ", " * ", " == ", " and ", "."]), children
        ).map("".join),
        st.tuples(identifiers, args).map(lambda t: f"{t[0]}({t[1]})"),
        args.map(lambda a: f"[{a}]"),
        st.tuples(children, children).map(lambda t: f"{{{t[0]}: {t[1]}}}"),
        children.map(lambda c: f"({c})"),
    )


expressions = st.recursive(atoms, _combine, max_leaves=6)

code_statements = st.one_of(
    st.tuples(identifiers, expressions).map(lambda t: f"{t[0]} = {t[1]}"),
    expressions.map(lambda e: f"return {e}"),
    expressions.map(lambda e: f"if {e}:"),
    expressions,
    st.lists(st.sampled_from(_ASCII_WORDS + _UNICODE_WORDS), min_size=1, max_size=5).map(
        lambda ws: "# " + " ".join(ws)
    ),
    st.just(""),
)
# A call or literal spread over several lines: brackets balanced only across lines.
multi_line_calls = st.tuples(
    identifiers, st.sampled_from(["()", "[]", "{}"]), st.lists(expressions, min_size=1, max_size=3)
).map(lambda t: f"{t[0]} = {t[1][0]}\n" + "".join(f"    {a},\n" for a in t[2]) + t[1][1])
code_lines = st.one_of(
    st.tuples(st.sampled_from(["", "    ", "        ", "\t"]), code_statements).map(
        lambda t: t[0] + t[1] if t[1] else ""
    ),
    multi_line_calls,
)
code_documents = st.lists(code_lines, min_size=1, max_size=10).map("\n".join)

sentences = st.tuples(
    st.lists(st.sampled_from(_PROSE_WORDS + _PROSE_UNICODE), min_size=1, max_size=10),
    st.sampled_from([".", "!", "?", ",", ";", ":", ""]),
).map(lambda t: " ".join(t[0]) + t[1])
prose_documents = st.lists(
    st.tuples(sentences, st.sampled_from([" ", "\n", "\n\n"])).map("".join), min_size=1, max_size=8
).map("".join)

documents = st.one_of(code_documents, prose_documents)


@dataclass(frozen=True)
class Hole:
    prefix: str
    middle: str
    suffix: str

    @property
    def rest_of_line(self) -> str:
        return self.suffix.split("\n", 1)[0]

    @property
    def following(self) -> str:
        """The lines after the caret's line, leading blank lines skipped."""
        if "\n" not in self.suffix:
            return ""
        return self.suffix.split("\n", 1)[1].lstrip("\n")


@st.composite
def holes(draw: st.DrawFn, docs: st.SearchStrategy[str] = documents) -> Hole:
    doc = draw(docs)
    i = draw(st.integers(min_value=0, max_value=len(doc)))
    j = draw(st.integers(min_value=i, max_value=len(doc)))
    return Hole(doc[:i], doc[i:j], doc[j:])


@st.composite
def holes_after_indentation(draw: st.DrawFn) -> Hole:
    """Holes whose caret stands right after a line's indentation, before its first word."""
    doc = draw(code_documents.filter(lambda d: any(line[:1] in " \t" for line in d.split("\n"))))
    spots = []
    start = 0
    for line in doc.split("\n"):
        word = len(line) - len(line.lstrip(" \t"))
        if 0 < word < len(line):
            spots.append(start + word)
        start += len(line) + 1
    assume(spots)
    i = draw(st.sampled_from(spots))
    j = draw(st.integers(min_value=i + 1, max_value=len(doc)))
    return Hole(doc[:i], doc[i:j], doc[j:])


# --- Ambiguity: when even a person could not tell the fault from the true middle. -----------


def _line_start_tails(prefix: str) -> list[str]:
    starts = [0, *(i + 1 for i, c in enumerate(prefix) if c == "\n")]
    tails = []
    for start in starts:
        tail = prefix[start:]
        tails += [tail, tail.lstrip(" \t")]
    return [t for t in tails if len(t.strip()) >= 3]


def starts_with_prefix_text(text: str, prefix: str) -> bool:
    """``text`` begins by repeating the prefix from some line start (with >= 3 non-spaces),
    or the caret line's indentation before a word.

    Such a middle reads exactly like a model echoing the line before the caret.
    """
    if any(text.startswith(tail) for tail in _line_start_tails(prefix)):
        return True
    # After indentation only, the same indentation again before a word reads as re-indenting.
    indent = prefix[prefix.rfind("\n") + 1 :]
    return bool(
        indent
        and not indent.strip()
        and text.startswith(indent)
        and len(text) > len(indent)
        and not text[len(indent)].isspace()
    )


def echoes_more_of_prefix(answer: str, prefix: str, echo: str) -> bool:
    """``answer`` starts with a longer stretch of the prefix than the ``echo`` put there:
    then the longer echo is the better reading, and the true middle cannot be recovered."""
    return any(
        len(tail) > len(echo) and answer.startswith(tail) for tail in _line_start_tails(prefix)
    )


def ends_with_suffix_start(text: str, suffix: str) -> bool:
    """``text`` ends with non-blank text that the suffix starts with: it reads like an echo."""
    return any(
        text.endswith(suffix[:k]) and suffix[:k].strip()
        for k in range(1, min(len(text), len(suffix)) + 1)
    )


def _has_letters(line: str) -> bool:
    return any(c.isalnum() for c in line)


def copies_following_lines(text: str, hole: Hole) -> bool:
    """From a line start, ``text`` writes the line that follows the caret's line, or runs
    into the following lines up to its end: it reads like the model re-emitting them."""
    following = hole.following
    if not following:
        return False
    starts = [i + 1 for i, c in enumerate(text) if c == "\n"]
    if hole.prefix == "" or hole.prefix.endswith("\n"):
        starts.insert(0, 0)
    next_line = following.split("\n", 1)[0]
    for start in starts:
        rest = text[start:].lstrip("\n")
        first = rest.split("\n", 1)[0]
        if _has_letters(first) and first.rstrip() == next_line.rstrip():
            return True
        if rest and _has_letters(rest) and _agrees(rest, following):
            return True
    return False


def _agrees(rest: str, following: str) -> bool:
    lines, target = rest.split("\n"), following.split("\n")
    if len(lines) > len(target):
        return False
    full = all(a.rstrip() == b.rstrip() for a, b in zip(lines[:-1], target, strict=False))
    return full and (
        target[len(lines) - 1].startswith(lines[-1])
        or lines[-1].rstrip() == target[len(lines) - 1].rstrip()
    )


def repeats_a_line(text: str) -> bool:
    """A line with letters or digits occurs four or more times: ``text`` could be read as a
    runaway loop. (Broader than the cleaner's rule, which wants the repeats at the end.)"""
    lines = [line for line in text.split("\n") if _has_letters(line)]
    return any(lines.count(line) >= 4 for line in set(lines))


def ends_its_line_before_a_break(hole: Hole) -> bool:
    """A one-line middle that finishes the caret's line with a break before the suffix's
    own break: exactly what a model's stray line break looks like."""
    body = hole.middle.rstrip("\n")
    return (
        hole.middle.endswith("\n")
        and hole.suffix.startswith("\n")
        and "\n" not in body
        and bool(body.strip())
    )


def starts_with_its_line_start(hole: Hole) -> bool:
    """The caret's line has one or two characters before the caret and the one-line middle
    starts with that line again, indentation included: with the rest of the line written
    after it, it reads as a model that rewrote the whole line."""
    current = hole.prefix[hole.prefix.rfind("\n") + 1 :]
    return (
        0 < len(current.strip()) < 3
        and "\n" not in hole.middle
        and hole.middle.startswith(current)
        and len(hole.middle) > len(current)
    )


def one_letter_finishes_the_word(hole: Hole) -> bool:
    """The caret's line ends with one letter that continues the middle's last word
    (``pas`` before ``s``): the middle with that letter again reads as the same word."""
    rest = hole.suffix.split("\n", 1)[0]
    return len(rest.strip()) == 1 and hole.middle[-1:].isalnum() and rest[:1].isalnum()


def unambiguous(hole: Hole) -> bool:
    """The true middle does not itself look like one of the faults the cleaner removes."""
    return not (
        ends_with_suffix_start(hole.middle, hole.suffix)
        or one_letter_finishes_the_word(hole)
        or ends_its_line_before_a_break(hole)
        or starts_with_prefix_text(hole.middle, hole.prefix)
        or starts_with_its_line_start(hole)
        or copies_following_lines(hole.middle, hole)
        or repeats_a_line(hole.middle)
    )

"""Holes cut at random spans of real source files: the Python standard library (where the
rules were developed) and this project's own code (held out: the rules never looked at it).

Shared by the property tests (``test_real_code.py``) and the figures script
(``bench/fim_exact_middle.py``). Each fault is what models were seen to do; ``faulty``
returns None when the fault cannot be told apart from the true middle at this hole.
"""

from __future__ import annotations

import random
import sysconfig
from functools import cache
from pathlib import Path

from anyfill.daemon.backends.base import FimPrompt, Plan
from anyfill.daemon.engine.engine import finish
from anyfill.daemon.fim.templates import ALL_SPECIAL_TOKENS, GENERIC_TOKENS
from anyfill.daemon.fim.textfix import FORMAT_TAGS
from tests.unit.fim.strategies import Hole, unambiguous

FAULTS = (
    "clean",
    "rest_of_line",
    "short_rest_of_line",
    "following_lines",
    "prefix_echo",
    "short_prefix_echo",
    "sentinel",
    "trailing_newline",
)
CORPORA = ("stdlib", "project")
PROJECT = Path(__file__).resolve().parents[3]
GARBAGE = "\nfoo()\nbar = 1\n"


@cache
def stdlib_files() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        path
        for path in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py"))
        if "test" not in path.parts[-2:][0] and 2_000 < path.stat().st_size < 200_000
    ]
    return tuple(files)


@cache
def project_files() -> tuple[Path, ...]:
    """This project's own Python code (daemon, config, ui): held-out real code."""
    files = [
        path
        for folder in ("daemon", "config", "ui")
        for path in sorted((PROJECT / folder).rglob("*.py"))
        if 2_000 < path.stat().st_size < 200_000
    ]
    return tuple(files)


def corpus_files(corpus: str) -> tuple[Path, ...]:
    return stdlib_files() if corpus == "stdlib" else project_files()


@cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def cut(
    rng: random.Random, *, at_line_end: bool = False, corpus: str = "stdlib", one_line: bool = False
) -> Hole:
    """A random span of a random file of ``corpus``: up to 4000 characters of context on
    each side (what the engine sends), a middle of 1 to 160 characters; ``at_line_end``:
    ending where a line ends (where a model's stray line break would go); ``one_line``:
    within one line, before the end of the line (what single-line mode completes)."""
    text = _text(rng.choice(corpus_files(corpus)))
    if one_line:
        start, line_end = 0, 0
        while line_end - start < 2:  # room for a middle and some text after it
            start = rng.randrange(0, len(text) - 2)
            line_end = text.find("\n", start)
            line_end = len(text) if line_end == -1 else line_end
        end = start + rng.randint(1, min(160, line_end - start - 1))
        return Hole(
            prefix=text[max(0, start - 4000) : start],
            middle=text[start:end],
            suffix=text[end : end + 4000],
        )
    start = rng.randrange(0, len(text) - 2)
    end = min(len(text), start + rng.randint(1, 160))
    if at_line_end:
        newline = text.find("\n", start + 1)
        end = newline if newline != -1 else len(text)
    return Hole(
        prefix=text[max(0, start - 4000) : start],
        middle=text[start:end],
        suffix=text[end : end + 4000],
    )


def cut_for(
    fault: str, rng: random.Random, *, corpus: str = "stdlib", one_line: bool = False
) -> Hole:
    """A hole where ``fault`` can happen. The short faults are rare at random spans (about
    one cut in a hundred), so their holes are cut on purpose: the caret one or two
    characters after a line's indentation (``short_prefix_echo``), or the middle ending one
    or two characters before its line's end (``short_rest_of_line``)."""
    if fault not in ("short_prefix_echo", "short_rest_of_line"):
        return cut(rng, at_line_end=fault == "trailing_newline", corpus=corpus, one_line=one_line)
    text = _text(rng.choice(corpus_files(corpus)))
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    for _ in range(200):
        n = rng.randrange(len(lines))
        line, at = lines[n], starts[n]
        body = len(line) - len(line.lstrip(" \t"))
        shown = rng.randint(1, 2)
        if fault == "short_prefix_echo":
            start = at + body + shown
            end = at + len(line) - rng.randint(3, 40)
        else:
            end = at + len(line) - shown
            start = end - rng.randint(1, 40) if one_line else end - rng.randint(1, 160)
        if not (at + body <= start < end <= at + len(line)) and not (
            fault == "short_rest_of_line" and not one_line and 0 < start < end
        ):
            continue
        return Hole(
            prefix=text[max(0, start - 4000) : start],
            middle=text[start:end],
            suffix=text[end : end + 4000],
        )
    return cut(rng, corpus=corpus, one_line=one_line)


def faulty(hole: Hole, fault: str, path: str = "native") -> str | None:
    """The raw answer with ``fault`` injected, or None when it is not a distinct fault here."""
    middle, suffix = hole.middle, hole.suffix
    line = suffix.split("\n", 1)[0]
    if fault == "clean":
        return middle
    if fault == "rest_of_line":
        # The model finishes the caret's line and writes its end again.
        if "\n" not in suffix or len(line.strip()) < 3:
            return None
        return middle + line
    if fault == "short_rest_of_line":
        # The caret's line ends in one or two characters (a word's last letter, "):"); the
        # model writes them again and goes on with the next line, which proves the overrun.
        following = hole.following
        if "\n" not in suffix or not 0 < len(line.strip()) < 3 or not following.strip():
            return None
        next_line = following.split("\n", 1)[0]
        if not any(c.isalnum() for c in next_line):
            return None
        return middle + suffix[: suffix.index(next_line, len(line)) + len(next_line)]
    if fault in ("prefix_echo", "short_prefix_echo"):
        # The model rewrites the caret's line from its start: the text before the caret
        # again (>= 3 non-space characters), or, with only one or two before the caret,
        # the whole line: those few characters, the middle and the rest of the line.
        before = hole.prefix[hole.prefix.rfind("\n") + 1 :]
        shown = len(before.strip())
        if fault == "prefix_echo":
            return before + middle if shown >= 3 else None
        if not 0 < shown < 3 or "\n" in middle or "\n" not in suffix or len(line.strip()) < 3:
            return None
        return before + middle + line
    if fault == "following_lines":
        # The model goes on past the hole and writes the lines that follow (two of them).
        rest = suffix.split("\n")
        if len(rest) < 4 or not any(c.isalnum() for c in rest[1]):
            return None
        return middle + "\n".join(rest[:3])
    if fault == "sentinel":
        if any(token in hole.prefix + suffix for token in (*ALL_SPECIAL_TOKENS, *GENERIC_TOKENS)):
            return None  # a document about FIM tokens: a token in the answer may be meant
        # Native: Code Llama's end token from a model anyfill cannot name; chat: a ChatML end.
        return middle + ("<EOT>" if path == "native" else "<|im_end|>") + GARBAGE
    if fault == "trailing_newline":
        # The caret's line finished, ended by the break that is already there.
        if "\n" in middle or not suffix.startswith("\n") or not suffix.strip():
            return None
        if not hole.prefix[hole.prefix.rfind("\n") + 1 :].strip():
            return None
        return middle + "\n"
    raise ValueError(fault)


def chat_can_carry(raw: str) -> bool:
    """Whether the chat path can carry ``raw`` at all: the block style ``<fill>\nX\n</fill>``
    owns those two line breaks, and the protocol's own tags and hole marker cannot travel
    inside an answer (this project's ``chat.py`` is made of them)."""
    block = raw.startswith("\n") and raw.endswith("\n")
    return not block and not any(tag in raw for tag in ("<fill>", "</fill>", "<|HOLE"))


NATIVE = Plan(mode="native")
CHAT = Plan(mode="chat", stop=("</fill>",))


def through(path: str, hole: Hole, raw: str, *, single_line: bool = False) -> str:
    """What the engine inserts for ``raw`` answered on ``path`` ("native" or "chat")."""
    prompt = FimPrompt(
        prefix=hole.prefix, suffix=hole.suffix, max_tokens=64, single_line=single_line
    )
    if path == "chat":
        return finish(f"<fill>{raw}</fill>", CHAT, prompt)
    return finish(raw, NATIVE, prompt)


#: Wrapping the unwrap step takes off an answer (think blocks, format tags, markers, fences):
#: a middle that holds it (this project's own FIM code writes about them) reads as wrapped.
WRAPPING = (
    "<think",
    "<reasoning>",
    "<|fim|>",
    "{{FILL_HERE}}",
    "```",
    "~~~",
    *(f"{tag}>" for name in FORMAT_TAGS for tag in (f"<{name}", f"</{name}")),
)


def fair(hole: Hole) -> bool:
    """The true middle does not itself look like a fault (then no cleaner can be right on
    both readings), and it has no special token or wrapping of its own."""
    return (
        unambiguous(hole)
        and "<" not in hole.middle[-1:]
        and hole.middle.strip() != ""
        and not any(wrap in hole.middle for wrap in WRAPPING)
        and not any(token in hole.middle for token in (*ALL_SPECIAL_TOKENS, *GENERIC_TOKENS))
    )

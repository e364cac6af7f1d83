"""Holes cut at random spans of real source files: the Python standard library.

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
from tests.unit.fim.strategies import Hole, unambiguous

FAULTS = ("clean", "rest_of_line", "following_lines", "sentinel", "trailing_newline")
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
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def cut(rng: random.Random, *, at_line_end: bool = False) -> Hole:
    """A random span of a random standard-library file: up to 4000 characters of context on
    each side (what the engine sends), a middle of 1 to 160 characters; ``at_line_end``:
    ending where a line ends (where a model's stray line break would go)."""
    text = _text(rng.choice(stdlib_files()))
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
    if fault == "following_lines":
        # The model goes on past the hole and writes the lines that follow (two of them).
        rest = suffix.split("\n")
        if len(rest) < 4 or not any(c.isalnum() for c in rest[1]):
            return None
        return middle + "\n".join(rest[:3])
    if fault == "sentinel":
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


NATIVE = Plan(mode="native")
CHAT = Plan(mode="chat", stop=("</fill>",))


def through(path: str, hole: Hole, raw: str) -> str:
    """What the engine inserts for ``raw`` answered on ``path`` ("native" or "chat")."""
    prompt = FimPrompt(prefix=hole.prefix, suffix=hole.suffix, max_tokens=64)
    if path == "chat":
        return finish(f"<fill>{raw}</fill>", CHAT, prompt)
    return finish(raw, NATIVE, prompt)


def fair(hole: Hole) -> bool:
    """The true middle does not itself look like a fault (then no cleaner can be right on
    both readings), and it has no special token of its own."""
    return unambiguous(hole) and "<" not in hole.middle[-1:] and hole.middle.strip() != ""

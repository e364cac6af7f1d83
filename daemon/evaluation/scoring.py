"""How a middle is scored against the canonical one: exact match and edit similarity.

Single-line follows the published rule (InCoder, the Qwen2.5-Coder report): the first
non-empty line of each middle, stripped of surrounding whitespace, compared exactly. The
other suites compare the whole middle with the trailing whitespace of each line and the
blank lines at its end removed (indentation and a leading space still count: they change
the program). Edit similarity is 1 - Levenshtein distance / the longer length, on the same
normalised texts, so an exact match is 1.0.
"""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein

from anyfill.daemon.evaluation.problems import Suite

__all__ = ["RULES", "edit_similarity", "exact_match", "normalise"]

RULES: dict[Suite, str] = {
    "single-line": (
        "exact match: the first non-empty line of the middle, stripped, equals the "
        "canonical solution's (the published single-line rule)"
    ),
    "multi-line": (
        "exact match: the whole middle equals the canonical one, trailing whitespace of "
        "each line and blank lines at the end removed"
    ),
}
RULES["random-span"] = RULES["multi-line"]
RULES["random-span-light"] = RULES["multi-line"]


def normalise(middle: str, suite: Suite) -> str:
    if suite == "single-line":
        return next((line.strip() for line in middle.splitlines() if line.strip()), "")
    lines = [line.rstrip() for line in middle.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def exact_match(middle: str, canonical: str, suite: Suite) -> bool:
    return normalise(middle, suite) == normalise(canonical, suite)


def edit_similarity(middle: str, canonical: str, suite: Suite) -> float:
    return float(
        Levenshtein.normalized_similarity(normalise(middle, suite), normalise(canonical, suite))
    )

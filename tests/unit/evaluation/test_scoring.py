"""The exact-match rules and edit similarity of ``anyfill eval``."""

from __future__ import annotations

import pytest

from anyfill.daemon.evaluation.scoring import RULES, edit_similarity, exact_match, normalise


def test_single_line_compares_the_first_non_empty_line_stripped() -> None:
    canonical = "    for idx, elem in enumerate(numbers):\n"
    assert exact_match("for idx, elem in enumerate(numbers):", canonical, "single-line")
    # Blank lines before it and anything after it do not count (the published rule).
    assert exact_match(
        "\n   \n    for idx, elem in enumerate(numbers):  \n        junk()\n",
        canonical,
        "single-line",
    )
    assert not exact_match("    for idx, elem in enumerate(nums):", canonical, "single-line")
    assert not exact_match("", canonical, "single-line")


def test_whole_middle_suites_keep_indentation_and_later_lines() -> None:
    canonical = "    a = 1\n    return a\n"
    assert exact_match("    a = 1   \n    return a\n\n\n", canonical, "multi-line")
    assert not exact_match("a = 1\nreturn a\n", canonical, "multi-line")  # indentation
    assert not exact_match("    a = 1\n", canonical, "multi-line")  # a line missing
    # A random span may start mid-line: its leading space is part of the program.
    assert not exact_match("idx != idx2:", " idx != idx2:", "random-span")
    assert exact_match(" idx != idx2:", " idx != idx2:", "random-span-light")


@pytest.mark.parametrize(
    ("middle", "canonical", "expected"),
    [
        ("abc", "abc", 1.0),
        ("abd", "abc", pytest.approx(2 / 3)),
        ("", "abcd", 0.0),
        ("", "", 1.0),
        ("kitten", "sitting", pytest.approx(1 - 3 / 7)),  # Levenshtein distance 3
    ],
)
def test_edit_similarity_is_one_minus_normalised_levenshtein(
    middle: str, canonical: str, expected: float
) -> None:
    assert edit_similarity(middle, canonical, "multi-line") == expected


def test_edit_similarity_uses_the_same_normalised_text() -> None:
    assert edit_similarity("  x = 1\nmore\n", "    x = 1\n", "single-line") == 1.0
    assert normalise("\n\n  x = 1  \n", "single-line") == "x = 1"


def test_every_suite_has_a_rule_to_print() -> None:
    assert set(RULES) == {"single-line", "multi-line", "random-span", "random-span-light"}
    assert "first non-empty line" in RULES["single-line"]

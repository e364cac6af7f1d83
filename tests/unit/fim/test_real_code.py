"""The exact middle on real code: standard-library files cut at random spans, each fault
injected, through the native and the chat paths (``engine.finish``, what both use)."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from anyfill.daemon.backends.base import FimPrompt, Plan
from anyfill.daemon.engine.engine import finish
from tests.unit.fim.real_code import (
    CORPORA,
    FAULTS,
    chat_can_carry,
    cut_for,
    fair,
    faulty,
    project_files,
    stdlib_files,
    through,
)

EXAMPLES = settings(max_examples=150, deadline=None)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def test_the_standard_library_is_there() -> None:
    assert len(stdlib_files()) > 100


@EXAMPLES
@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("path", ["native", "chat"])
@pytest.mark.parametrize("fault", FAULTS)
@given(seed=seeds)
def test_every_fault_on_real_code_gives_the_true_middle(
    path: str, fault: str, corpus: str, seed: int
) -> None:
    _check(fault, path, corpus, seed, single_line=False)


@EXAMPLES
@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("path", ["native", "chat"])
@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "trailing_newline"])
@given(seed=seeds)
def test_every_fault_in_single_line_mode_gives_the_true_middle(
    path: str, fault: str, corpus: str, seed: int
) -> None:
    _check(fault, path, corpus, seed, single_line=True)


def _check(fault: str, path: str, corpus: str, seed: int, *, single_line: bool) -> None:
    hole = cut_for(fault, random.Random(seed), corpus=corpus, one_line=single_line)
    assume(fair(hole))
    raw = faulty(hole, fault, path)
    assume(raw is not None)
    assert raw is not None
    assume(path != "chat" or chat_can_carry(raw))
    assert through(path, hole, raw, single_line=single_line) == hole.middle


def test_the_project_code_is_there() -> None:
    assert len(project_files()) > 50


# The examples, each a class the properties above cover too.


def _native(raw: str, prefix: str, suffix: str) -> str:
    return finish(raw, Plan(mode="native"), FimPrompt(prefix=prefix, suffix=suffix))


def test_sentinel_of_an_unknown_family_is_cut() -> None:
    assert _native("world<EOT>\nfoo()", 'msg = "Hello, ', '"\n') == "world"


def test_sentinel_in_the_document_itself_is_kept() -> None:
    # A text about FIM tokens still completes with them.
    prefix = "Code Llama ends each middle with <EOT>: after "
    assert _native("the middle, <EOT>", prefix, ".\n") == "the middle, <EOT>"


def test_a_known_family_keeps_generic_text() -> None:
    plan = Plan(mode="template", template="starcoder")
    prompt = FimPrompt(prefix="<p>Old price: ", suffix="</p>\n")
    assert finish("<s>9 EUR</s>", plan, prompt) == "<s>9 EUR</s>"


def test_one_letter_that_the_suffix_starts_with_is_no_overrun() -> None:
    assert _native("addres", "print(", "s)\n") == "addres"


def test_trailing_newline_before_a_blank_line_is_dropped() -> None:
    prefix = "import math\n\ndef area(r):\n    return "
    assert _native("3.14159 * r ** 2\n", prefix, "\n\nprint(area(2))\n") == "3.14159 * r ** 2"


def test_whole_rest_of_line_is_cut_inside_a_long_docstring() -> None:
    # An open triple-quoted string before the caret made the balance check keep the echo.
    prefix = 'def f():\n    """Say it\n    with \'quotes\n    """\n    value = compute('
    suffix = "alpha, beta)\n    return value\n"
    assert _native("alpha, beta)", prefix, suffix) == ""


def test_the_same_evidence_rule_holds_after_a_stop_string_was_cut() -> None:
    assert _native("addres<EOT>\nfoo()", "print(", "s)\n") == "addres"
    assert _native("alpha, beta)<EOT>", "value = compute(", "alpha, beta)\n") == ""


# The three miss classes of issue 22, each also a fault the properties above run.


def test_a_rewrite_of_the_whole_line_loses_its_short_start_too() -> None:
    # Two characters before the caret, the model wrote the whole line again.
    prefix = "def f():\n    x"
    assert _native("    x_total = compute(a)", prefix, " = compute(a)\n    return x\n") == "_total"


def test_a_middle_that_starts_like_the_line_keeps_it_without_a_rewrite() -> None:
    prefix = 'def f():\n    "'
    suffix = " pane.\n    return x\n"
    assert _native('""Query the pane.', prefix, suffix) == '""Query the'


def test_single_line_mode_checks_the_next_line_before_keeping_one() -> None:
    # "):" again and the next line: the repeat of the following line proves the overrun.
    prefix = "def area(r"
    suffix = "):\n    return r * r\n"
    raw = "adius):\n    return r * r"
    plan, prompt = Plan(mode="native"), FimPrompt(prefix=prefix, suffix=suffix, single_line=True)
    assert finish(raw, plan, prompt) == "adius"


def test_a_last_letter_again_with_the_next_line_is_an_overrun() -> None:
    # Single-line mode: one letter of the rest of the line again, then the next line.
    prefix, suffix = "def f(value):\n    result = ", "e\n    return result\n"
    plan, prompt = Plan(mode="native"), FimPrompt(prefix=prefix, suffix=suffix, single_line=True)
    assert finish("value\n    return result", plan, prompt) == "valu"
    assert finish("valu", plan, prompt) == "valu"

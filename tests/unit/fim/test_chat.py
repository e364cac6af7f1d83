"""Chat infill: the prompt's shape and the extraction of the hole's text from replies."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from anyfill.daemon.fim.chat import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    CHAT_STOP,
    HOLE,
    build_chat_prompt,
    extract_middle,
)
from anyfill.daemon.fim.postprocess import clean
from tests.unit.fim.strategies import Hole, holes, unambiguous


def test_prompt_marks_the_hole_in_one_user_message() -> None:
    prompt = build_chat_prompt("def f(x):\n    return ", "\n\nprint(f(2))\n")
    assert prompt.user == f"<document>def f(x):\n    return {HOLE}\n\nprint(f(2))\n</document>"
    assert prompt.marker == HOLE
    assert HOLE in prompt.system
    assert ANSWER_OPEN in prompt.system
    assert ANSWER_CLOSE in prompt.system
    assert CHAT_STOP == (ANSWER_CLOSE,)


def test_prompt_is_compact() -> None:
    prompt = build_chat_prompt("", "")
    examples = re.findall(r"<document>", prompt.system)
    assert 1 <= len(examples) <= 3
    assert len(prompt.system) < 1200


def test_prompt_examples_follow_their_own_rules() -> None:
    """Each example answer is exactly a middle: nothing in it repeats the document."""
    system = build_chat_prompt("", "").system
    pairs = re.findall(
        rf"(?m)^<document>(.*?)</document>\n{ANSWER_OPEN}(.*?){ANSWER_CLOSE}",
        system,
        re.S,
    )
    assert len(pairs) >= 2
    for document, answer in pairs:
        prefix, suffix = document.split(HOLE)
        assert clean(answer, prefix, suffix) == answer
        assert extract_middle(f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}") == answer


def test_single_line_and_language() -> None:
    plain = build_chat_prompt("a", "b")
    single = build_chat_prompt("a", "b", single_line=True, language="Python")
    assert "no line breaks" in single.system
    assert "no line breaks" not in plain.system
    assert single.system.endswith("The document is Python.")
    assert single.user == plain.user


def test_document_containing_the_marker_gets_another_marker() -> None:
    prompt = build_chat_prompt(f"HOLE = '{HOLE}'\n", "")
    assert prompt.marker != HOLE
    assert prompt.user.count(prompt.marker) == 1
    assert prompt.marker in prompt.system
    assert HOLE not in prompt.system
    assert extract_middle("<fill>x = 1</fill>", marker=prompt.marker) == "x = 1"
    assert extract_middle(f"<fill>{HOLE}</fill>", marker=prompt.marker) == HOLE


@pytest.mark.parametrize(
    ("reply", "middle"),
    [
        ("<fill>Paris</fill>", "Paris"),
        ("<fill>Paris", "Paris"),  # the backend stopped at the closing tag
        ("<fill></fill>", ""),
        ("<fill>\nreturn 1\n</fill>", "return 1"),  # block style
        ("<fill> x</fill>", " x"),  # its own space is kept
        ("Sure! <fill>Paris</fill>", "Paris"),
        ("I will answer in <fill> tags:\n<fill>x</fill>", "x"),
        ("<think>\nThe capital...\n</think>\n\n<fill>Paris</fill>", "Paris"),
        ("<think>never finished", ""),
        ("<fill>```python\nx = 1\n```</fill>", "x = 1"),
        ("```\n<fill>x = 1</fill>\n```", "x = 1"),
        ("Here is the missing code:\n```python\nx = 1\n```", "x = 1"),
        ("Paris", "Paris"),
        ("The hole needs a number:\n```python\nx = 1\n```\nThis sets x.", "x = 1"),
        ("```\na\n```\nor\n```\nb\n```", ""),  # which one? empty, not wrong
        (f"<fill>def f(): {HOLE}</fill>", ""),  # re-quoted with the marker: not an answer
        (f"def f():\n    {HOLE}\n", ""),
        ("<fill>a <|HOLE2|></fill>", ""),  # the numbered variant too
    ],
)
def test_extract_middle(reply: str, middle: str) -> None:
    assert extract_middle(reply) == middle


def test_requoted_document_is_reduced_by_clean() -> None:
    prefix, suffix = "def area(r):\n    return ", " * r ** 2\n"
    reply = "<fill>def area(r):\n    return math.pi * r ** 2\n</fill>"
    assert clean(extract_middle(reply), prefix, suffix) == "math.pi"


def test_reindented_line_is_reduced_by_clean() -> None:
    prefix, suffix = "def f():\n    ", "\n"
    assert clean(extract_middle("<fill>    return 1</fill>"), prefix, suffix) == "return 1"


EXAMPLES = settings(max_examples=200, deadline=None)


@EXAMPLES
@given(
    holes().filter(unambiguous),
    st.sampled_from(["", "Sure! ", "Here is the text:\n", "<think>\nhm\n</think>\n\n"]),
    st.booleans(),
    st.booleans(),
)
def test_any_reply_style_yields_the_middle(
    hole: Hole, opener: str, closed: bool, block: bool
) -> None:
    middle = hole.middle
    if not block:
        # inline "<fill>\nX\n</fill>" is indistinguishable from block style around X
        assume(not (len(middle) >= 2 and middle.startswith("\n") and middle.endswith("\n")))
    body = f"\n{middle}\n" if block else middle
    # Without the closing tag: the backend stopped at it (CHAT_STOP), text before it intact.
    reply = f"{opener}{ANSWER_OPEN}{body}{ANSWER_CLOSE if closed else ''}"
    extracted = extract_middle(reply)
    assert extracted == middle
    assert clean(extracted, hole.prefix, hole.suffix) == middle

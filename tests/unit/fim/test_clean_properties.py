"""Property tests: for random documents and holes, each fault injected into the true middle is
removed exactly, and a clean answer comes back unchanged.

Every test starts from a hole whose true middle is unambiguous (see strategies.unambiguous):
a middle that itself ends with the start of the suffix, starts by repeating the line before
the caret, or contains the line after the caret is indistinguishable from the fault, so no
cleaner could be right on both; those holes are excluded, never the assertion weakened.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from anyfill.daemon.fim.postprocess import clean
from anyfill.daemon.fim.templates import ALL_SPECIAL_TOKENS, TEMPLATES
from tests.unit.fim.strategies import (
    Hole,
    copies_following_lines,
    echoes_more_of_prefix,
    holes,
    holes_after_indentation,
    prose_documents,
    starts_with_prefix_text,
    unambiguous,
)

EXAMPLES = settings(max_examples=200, deadline=None)

unambiguous_holes = holes().filter(unambiguous)


@EXAMPLES
@given(unambiguous_holes)
def test_clean_answer_is_unchanged(hole: Hole) -> None:
    assert clean(hole.middle, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes.filter(lambda h: "\n" not in h.middle))
def test_clean_single_line_answer_is_unchanged_in_single_line_mode(hole: Hole) -> None:
    assert clean(hole.middle, hole.prefix, hole.suffix, single_line=True) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.data())
def test_suffix_echo_is_removed(hole: Hole, data: st.DataObject) -> None:
    suffix = hole.suffix
    # The model repeats whole words: an echo that stops inside a word of the suffix ("bo" +
    # "ok") is what a continuing word looks like. Whitespace-only echoes are ambiguous too
    # (a blank line may be meant). A repeat must also be told from a coincidence: the
    # whole rest of the caret's line (not a banner of one repeated character), or whole words
    # with three letters or digits.
    line = suffix.split("\n", 1)[0]
    ends = [
        k
        for k in range(1, len(suffix) + 1)
        if suffix[:k].strip()
        and not (k < len(suffix) and suffix[k - 1].isalnum() and suffix[k].isalnum())
        and suffix[k - 1] != "_"
        and (
            sum(c.isalnum() for c in suffix[:k]) >= 3
            or (k >= len(line) and len(line.strip()) >= 3 and len(set(line.strip())) > 1)
        )
    ]
    assume(ends)
    k = data.draw(st.sampled_from(ends), label="echo length")
    answer = hole.middle + suffix[:k]
    assume(not hole.middle or not (hole.middle[-1].isalnum() and suffix[0].isalnum()))
    # With the echo the answer may start like the prefix (an empty middle and a suffix that
    # repeats the line before): then it is an echo of both sides.
    assume(not starts_with_prefix_text(answer, hole.prefix))
    assert clean(answer, hole.prefix, suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.booleans())
def test_prefix_line_echo_is_removed(hole: Hole, without_indent: bool) -> None:
    line = hole.prefix[hole.prefix.rfind("\n") + 1 :]
    echo = line.lstrip(" \t") if without_indent else line
    assume(len(echo.strip()) >= 3)
    answer = echo + hole.middle
    # If the answer also starts with a longer stretch of the prefix, that is the echo.
    assume(not echoes_more_of_prefix(answer, hole.prefix, echo))
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes)
def test_whole_document_requote_is_reduced_to_the_middle(hole: Hole) -> None:
    assume(len(hole.prefix.strip()) >= 3)
    answer = hole.prefix + hole.middle + hole.suffix
    assume(hole.suffix.strip() or not hole.suffix)
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes)
def test_rewritten_line_is_reduced_to_the_middle(hole: Hole) -> None:
    line = hole.prefix[hole.prefix.rfind("\n") + 1 :]
    rest = hole.rest_of_line
    assume(len(line.strip()) >= 3 and rest.strip())
    assume(not (rest[-1:].isalnum() and hole.suffix[len(rest) : len(rest) + 1].isalnum()))
    answer = line + hole.middle + rest
    assume(not echoes_more_of_prefix(answer, hole.prefix, line))
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.sampled_from(["", "python", "text", "js"]))
def test_code_fence_is_removed(hole: Hole, language: str) -> None:
    answer = f"```{language}\n{hole.middle}\n```"
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


PREAMBLES = [
    "Here is the completion:",
    "Sure! Here's the missing text:",
    "Here's the code that goes in the hole:",
    "Certainly. Below is what belongs in the middle:",
]


@EXAMPLES
@given(unambiguous_holes, st.sampled_from(PREAMBLES), st.booleans())
def test_preamble_is_removed(hole: Hole, preamble: str, fenced: bool) -> None:
    body = f"```\n{hole.middle}\n```" if fenced else hole.middle
    answer = f"{preamble}\n{body}"
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, prose_documents)
def test_think_block_is_removed(hole: Hole, reasoning: str) -> None:
    answer = f"<think>\n{reasoning}\n</think>\n\n{hole.middle}"
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.sampled_from(["COMPLETION", "fill"]), st.booleans())
def test_format_tags_are_removed(hole: Hole, tag: str, block_style: bool) -> None:
    middle = hole.middle
    if not block_style:
        # Inline "<t>\nX\n</t>" reads exactly like block style "<t>\nX\n</t>" around X.
        assume(not (len(middle) >= 2 and middle.startswith("\n") and middle.endswith("\n")))
    answer = f"<{tag}>\n{middle}\n</{tag}>" if block_style else f"<{tag}>{middle}</{tag}>"
    assert clean(answer, hole.prefix, hole.suffix) == middle


@EXAMPLES
@given(unambiguous_holes, st.sampled_from(sorted(TEMPLATES)), st.data(), st.text(max_size=40))
def test_stop_token_and_garbage_are_cut(
    hole: Hole, family: str, data: st.DataObject, garbage: str
) -> None:
    template = TEMPLATES[family]
    token = data.draw(st.sampled_from(template.stop), label="stop token")
    answer = hole.middle + token + garbage
    assert clean(answer, hole.prefix, hole.suffix, stop=template.stop) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.sampled_from(ALL_SPECIAL_TOKENS), st.text(max_size=40))
def test_leaked_token_of_another_family_is_cut(hole: Hole, token: str, garbage: str) -> None:
    answer = hole.middle + token + garbage
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.data())
def test_repeated_following_lines_are_dropped(hole: Hole, data: st.DataObject) -> None:
    following = hole.following
    lines = following.split("\n")
    assume(following.strip())
    n = data.draw(st.integers(min_value=1, max_value=len(lines)), label="lines repeated")
    repeated = "\n".join(lines[:n])
    invented = data.draw(st.sampled_from(["", "\nextra = 1", "\n# more"]), label="invented")
    skipped = hole.suffix[len(hole.rest_of_line) + 1 : len(hole.suffix) - len(following)]
    answer = hole.middle + hole.rest_of_line + "\n" + skipped + repeated + invented
    # The cleaner recognises the repetition only by a line with letters or digits: the
    # first repeated line must have one when the model goes on inventing after it, and
    # some repeated line must have one otherwise (a lone "}" may legitimately recur).
    first = lines[0]
    if invented:
        assume(any(c.isalnum() for c in first))
    else:
        assume(any(c.isalnum() for c in repeated))
    assume(not copies_following_lines(hole.middle + hole.rest_of_line, hole))
    # A prefix that ends with the same lines as follow the caret makes the repetition an
    # echo of the prefix as well.
    assume(not starts_with_prefix_text(answer, hole.prefix))
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes.filter(lambda h: "\n" not in h.middle), st.text(max_size=30))
def test_single_line_mode_keeps_the_first_line(hole: Hole, more: str) -> None:
    rest = hole.rest_of_line
    # The model finishes the line (rest repeated) and goes on; the repeated rest must be
    # recognisable as an echo: non-blank and ending on a word boundary.
    assume(rest.strip() or not rest)
    assume(not (rest[-1:].isalnum() and hole.suffix[len(rest) : len(rest) + 1].isalnum()))
    answer = hole.middle + rest + "\n" + more
    assume(not starts_with_prefix_text(answer, hole.prefix))
    assert clean(answer, hole.prefix, hole.suffix, single_line=True) == hole.middle


@EXAMPLES
@given(holes_after_indentation().filter(unambiguous))
def test_repeated_indentation_is_removed(hole: Hole) -> None:
    indent = hole.prefix[hole.prefix.rfind("\n") + 1 :]
    answer = indent + hole.middle
    # Twice the indentation may be the line's real depth (after a block opener, or as deep
    # as the next line): then the caret stood inside the indentation, and that reading wins.
    lines = [line for line in hole.prefix.split("\n")[:-1] if line.strip()]
    depth = indent + hole.middle[: len(hole.middle) - len(hole.middle.lstrip(" \t"))] + indent
    if lines:
        above = lines[-1][: len(lines[-1]) - len(lines[-1].lstrip(" \t"))]
        assume(depth != above)
        opens = lines[-1].rstrip().endswith((":", "{", "(", "["))
        assume(not (opens and depth in (above + "  ", above + "    ", above + "\t")))
    after = [line for line in hole.suffix.split("\n")[1:] if line.strip()]
    assume(not after or after[0][: len(after[0]) - len(after[0].lstrip(" \t"))] != depth)
    assume(not echoes_more_of_prefix(answer, hole.prefix, indent))
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.booleans(), st.booleans(), st.booleans())
def test_chat_style_rewrite_of_the_line_in_a_fence(
    hole: Hole, think: bool, preamble: bool, stop: bool
) -> None:
    """What chat models do at once: reason, announce, fence, and rewrite the whole line."""
    line = hole.prefix[hole.prefix.rfind("\n") + 1 :]
    rest = hole.rest_of_line
    assume(len(line.strip()) >= 3 and rest.strip())
    assume(not (rest[-1:].isalnum() and hole.suffix[len(rest) : len(rest) + 1].isalnum()))
    assume(not echoes_more_of_prefix(line + hole.middle + rest, hole.prefix, line))
    answer = f"```\n{line}{hole.middle}{rest}\n```"
    if preamble:
        answer = f"Here is the completion:\n{answer}"
    if think:
        answer = f"<think>\nLet me see.\n</think>\n\n{answer}"
    if stop:
        answer += "<|im_end|>\n<|im_start|>user"
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle


@EXAMPLES
@given(unambiguous_holes, st.integers(min_value=1, max_value=3), st.integers(5, 9), st.data())
def test_runaway_repetition_is_cut_to_one_round(
    hole: Hole, period: int, rounds: int, data: st.DataObject
) -> None:
    """The model repeats the middle's last lines until its token limit (maybe mid-line)."""
    lines = hole.middle.split("\n")
    assume(len(lines) >= period)
    block = lines[len(lines) - period :]
    assume(any(c.isalnum() for line in block for c in line))
    # Where the loop starts must be visible: if the line before the block equals the block's
    # last line, the repetition reads as starting one line earlier (a rotated block), and
    # either round is "one round".
    assume(len(lines) == period or lines[len(lines) - period - 1] != block[-1])
    # Likewise a block that is itself a shorter loop (two equal lines at period 2) reads as
    # that shorter loop, starting inside the middle: one round of it is as right as ours.
    assume(not any(block == block[:p] * (period // p) for p in range(1, period) if period % p == 0))
    loop = "".join("\n" + "\n".join(block) for _ in range(rounds))
    cut = data.draw(st.integers(min_value=0, max_value=len(block[0])), label="last line cut")
    answer = hole.middle + loop + ("\n" + block[0][:cut] if cut else "")
    # The loop must not also read as the lines that follow the caret.
    assume(not copies_following_lines(answer, hole))
    assert clean(answer, hole.prefix, hole.suffix) == hole.middle

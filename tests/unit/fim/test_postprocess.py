"""One example per cleaning rule, the seed example, and the single-line decision."""

from __future__ import annotations

import pytest

from anyfill.daemon.fim.overlap import imbalance
from anyfill.daemon.fim.postprocess import clean, wants_single_line
from anyfill.daemon.fim.templates import TEMPLATES


def test_seed_example_suffix_echo() -> None:
    assert clean('lo World")', 'print("Hel', ")") == 'lo World"'


@pytest.mark.parametrize(
    ("raw", "prefix", "suffix", "middle"),
    [
        # the model closes an inner call: the ")" is its own, keeping it balances the line
        ("foo(bar)", "print(", ")", "foo(bar)"),
        ("x[0]", "f(", ")", "x[0]"),
        # the quote and paren both repeated
        ('lo World")', 'print("Hel', '")', "lo World"),
        # a repeated word before the rest of a sentence
        ("hello world", "Say ", " world.", "hello"),
        # the rest of the line repeated, brackets neutral: whole words, so an echo
        ("total + 1]", "x = [", "total + 1]\n", ""),
        # a word that merely continues into the suffix: "bo" + "ok" is "book", keep
        ("bo", "a ", "ok", "bo"),
        # a newline before a newline may be a blank line: keep
        ("x = 1\n", "a = 0\n", "\nb = 2", "x = 1\n"),
        # the whole rest of the document
        ("1)\n    return y\n", "    y = f(", ")\n    return y\n", "1"),
    ],
)
def test_suffix_echo(raw: str, prefix: str, suffix: str, middle: str) -> None:
    assert clean(raw, prefix, suffix) == middle


@pytest.mark.parametrize(
    ("raw", "prefix", "middle"),
    [
        ("    return x + 1", "def f(x):\n    return x", " + 1"),  # the line again
        ("return x + 1", "def f(x):\n    return x", " + 1"),  # ...without its indent
        ("def f(x):\n    return x + 1", "def f(x):\n    return x", " + 1"),  # last lines
        ("Dear Anna, thanks", "Dear Anna,", " thanks"),
        ("    return 1", "def f():\n    ", "return 1"),  # indentation written again
        ("ab", "ab", "ab"),  # too short to call it an echo
        ("      return 1", "def f():\n    ", "      return 1"),  # deeper: maybe meant
        ("x = x + 1", "y = 2\n", "x = x + 1"),  # caret on a fresh line: no echo
    ],
)
def test_prefix_echo(raw: str, prefix: str, middle: str) -> None:
    assert clean(raw, prefix, "\n") == middle


def test_whole_document_requoted() -> None:
    prefix, suffix = "def f(x):\n    return x", "\n\nprint(f(2))\n"
    assert clean(prefix + " + 1" + suffix, prefix, suffix) == " + 1"


def test_rewritten_line_reduced_to_middle() -> None:
    assert clean('print("Hello World")', 'print("Hel', '")\nx = 1') == "lo World"


@pytest.mark.parametrize(
    ("raw", "middle"),
    [
        ("```python\nx = 1\n```", "x = 1"),
        ("```\nx = 1\n\n```", "x = 1\n"),
        ("~~~\nx = 1\n~~~\n", "x = 1"),
        ("Here is the completion:\nx = 1", "x = 1"),
        ("Sure! Here's the code:\n```python\nx = 1\n```", "x = 1"),
        ("<think>\nThe user wants a number.\n</think>\n\nx = 1", "x = 1"),
        ("<think>unfinished reasoning", ""),
        ("<COMPLETION>x = 1</COMPLETION>", "x = 1"),
        ("<fill>\nx = 1\n</fill>", "x = 1"),
        ("x = 1</COMPLETION>\nmore", "x = 1"),
        ("<|fim|>x = 1", "x = 1"),
        # wrappers inside wrappers
        ("<think>ok</think>\n\n```\n<COMPLETION>x = 1</COMPLETION>\n```", "x = 1"),
    ],
)
def test_wrapping_removed(raw: str, middle: str) -> None:
    assert clean(raw, "a = 0\n", "\nb = 2") == middle


@pytest.mark.parametrize(
    "raw",
    [
        "Sure, I will come on Monday.",  # starts like a preamble but is the text
        "Here is my address:\nMain Street 1",  # no task words: it is the letter's own text
        "Sure, here is the missing invoice:\nNo. 42",  # "missing" about the content
        "See <fill> below",  # a tag in passing, not around the answer
        "<s>strike</s>",  # HTML, not a BOS token
        "a <PRE> b",  # CodeLlama's token is only cut when it is a stop of the template
    ],
)
def test_clean_answers_unchanged(raw: str) -> None:
    assert clean(raw, "Hello,\n", "\nBye") == raw


def test_fences_kept_in_a_document_that_uses_fences() -> None:
    raw = "```sh\nls\n```"
    assert clean(raw, "Run this:\n", "\n\nThen ```exit```.") == raw


def test_stop_strings_and_leaked_tokens() -> None:
    qwen = TEMPLATES["qwen"]
    assert clean("x = 1<|endoftext|>junk", "a = ", "\n", stop=qwen.stop) == "x = 1"
    # another family's token leaking (a Qwen2 model fed Qwen1.5 tokens)
    assert clean("x + 1</fim_middle>", "y = ", "\n") == "x + 1"
    # a DeepSeek end token without a stop list
    assert clean("y\uff5c>", "x = ", "") == "y\uff5c>"  # not a token
    assert clean("y<\uff5cend\u2581of\u2581sentence\uff5c>z", "x = ", "") == "y"
    # generic spellings are cut only as the template's stops
    assert clean("y <EOT>", "x = ", "", stop=TEMPLATES["codellama"].stop) == "y "
    # a FIM token right at the start: an empty middle, as the server would stop there
    assert clean("<|fim_middle|>x", "a = ", "") == ""


def test_special_token_in_the_document_is_not_cut() -> None:
    prefix = 'STOP = ["<|endoftext|>", '
    assert clean('"<|im_end|>"]', prefix, "\n") == '"<|im_end|>"]'
    assert clean('"<|fim_pad|>", "<|im_end|>"', prefix, "]\n") == '"<|fim_pad|>", "<|im_end|>"'


@pytest.mark.parametrize(
    ("raw", "suffix", "middle"),
    [
        # re-emits the following lines and stops
        ("x = 1\n    return x\n", "\n    return x\n", "x = 1"),
        # ... and goes on inventing after them
        ("x = 1\n    return x\nprint(f())\n", "\n    return x\n", "x = 1"),
        # blank lines in between are part of what follows
        ("x = 1\n\n\ndef g():\n", "\n\n\ndef g():\n    pass\n", "x = 1"),
        # a lone closer may recur legitimately
        ("if a:\n        b()\n    }\n", "\n}\nrest()", "if a:\n        b()\n    }\n"),
    ],
)
def test_following_lines(raw: str, suffix: str, middle: str) -> None:
    assert clean(raw, "def f():\n    ", suffix) == middle


def test_single_line_mode() -> None:
    assert clean('lo World")\nprint(2)', 'print("Hel', ")\n", single_line=True) == 'lo World"'
    assert clean("abc\ndef", "x = ", "\n", single_line=True) == "abc"
    assert clean("abc\ndef", "x = ", "\n", single_line=False) == "abc\ndef"


@pytest.mark.parametrize(
    ("prefix", "suffix", "expected"),
    [
        ("print(", ")\n", True),  # text after the caret
        ("x = ", "\nmore", False),  # end of line
        ("x = ", "   \nmore", False),  # only spaces after the caret
        ("x = ", "", False),
        ("code\n# a comment ", "\n", True),
        ("    // note ", "\n", True),
        ("- item ", "\n", True),
        ("1. first ", "\n", True),
        ("> quoted ", "\n", True),
        ("a - b ", "\n", False),
    ],
)
def test_wants_single_line_auto(prefix: str, suffix: str, expected: bool) -> None:
    assert wants_single_line(prefix, suffix, "auto") is expected


def test_wants_single_line_settings() -> None:
    assert wants_single_line("x = ", "", "always") is True
    assert wants_single_line("print(", ")", "never") is False


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ('print("Hello")', 0),
        ('print("Hello"))', 1),
        ("f(a[1], {b: (c)})", 0),
        ("f(a[1)]", 2),
        ("x = \"(\" + ')'", 0),  # brackets inside strings do not count
        ("it's don't", 0),  # apostrophes are not quotes
        ('a = "open\nb = 1', 1),  # an unterminated string ends at the line
        ('"a\\"b"', 0),  # escaped quote
    ],
)
def test_imbalance(text: str, errors: int) -> None:
    assert imbalance(text) == errors


@pytest.mark.parametrize(
    ("raw", "middle"),
    [
        ("x = 1\nfoo()\nfoo()\nfoo()\nfoo()\nfoo()\nfo", "x = 1\nfoo()"),
        ("a\nb()\nc()\nb()\nc()\nb()\nc()\nb()\nc()\nb(", "a\nb()\nc()"),
        ("a()\na()\na()\na()", "a()\na()\na()\na()"),  # four times: could be meant
        ("f(\n}\n}\n}\n}\n}\n}", "f(\n}\n}\n}\n}\n}\n}"),  # closers may pile up
    ],
)
def test_runaway_repetition(raw: str, middle: str) -> None:
    assert clean(raw, "def f():\n", "") == middle


@pytest.mark.parametrize(
    ("raw", "prefix", "middle"),
    [
        # terminal escapes, BEL, NUL, backspace: never typed into a document
        ("a\x1b[2Jb\x07c\x00d\x08e", "x = ", "a[2Jbcde"),
        # bidi override and line separator (Trojan Source, JS line breaks)
        ("ok\u202e // evil\u2028", "s = ", "ok // evil"),
        # CRLF line ends stay; a lone CR (which would overwrite the line) goes
        ("one\r\ntwo\rthree", "a\n", "one\r\ntwothree"),
        # a control character the document holds itself is the user's own
        ("\x1b[0m", 'print("\x1b[1m', "\x1b[0m"),
    ],
)
def test_control_characters_are_dropped_unless_the_document_has_them(
    raw: str, prefix: str, middle: str
) -> None:
    assert clean(raw, prefix, "") == middle

"""docs/fim.md stays true: its cleaning examples run, its chat prompt is the real one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from anyfill.daemon.fim.chat import build_chat_prompt
from anyfill.daemon.fim.postprocess import clean
from anyfill.daemon.fim.templates import TEMPLATES

DOC = (Path(__file__).parents[3] / "docs" / "fim.md").read_text(encoding="utf-8")
EXAMPLE = re.compile(r"^[^\n]*?:\s+(clean\(.*\))  ->  (.*)$", re.M)


def _examples() -> list[tuple[str, str]]:
    return EXAMPLE.findall(DOC)


def test_doc_has_an_example_per_step() -> None:
    labels = {line.split()[0] for line in re.findall(r"^\d [^\n]*clean\(", DOC, re.M)}
    assert labels == {"1", "2", "3", "4", "5", "6"}


@pytest.mark.parametrize(("call", "result"), _examples())
def test_cleaning_example(call: str, result: str) -> None:
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call)
    args = [ast.literal_eval(arg) for arg in node.args]
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    assert clean(*args, **kwargs) == ast.literal_eval(result)


def test_chat_prompt_in_doc_is_the_real_one() -> None:
    system = build_chat_prompt("", "").system
    assert f"~~~text\n{system}\n~~~" in DOC
    user = build_chat_prompt("def f(x):\n    return ", "\n").user
    assert f"~~~text\n{user}\n~~~" in DOC


def test_template_table_lists_every_template() -> None:
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", DOC, re.M)
    assert sorted(rows) == sorted(TEMPLATES)

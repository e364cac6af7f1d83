"""The HumanEval infilling data shipped with anyfill, and how a problem is asked."""

from __future__ import annotations

from importlib import resources

import pytest

from anyfill.daemon.evaluation.problems import SUITES, load_problems
from anyfill.daemon.evaluation.runner import context_for, program_for

COUNTS = {"single-line": 1033, "multi-line": 5815, "random-span": 1640, "random-span-light": 164}


@pytest.mark.parametrize("suite", SUITES)
def test_each_suite_has_its_published_number_of_problems(suite: str) -> None:
    problems = list(load_problems(suite))  # type: ignore[arg-type]
    assert len(problems) == COUNTS[suite]
    assert len({p.task_id for p in problems}) == len(problems)
    assert all(p.test and p.entry_point and p.prompt for p in problems)


def test_limit_reads_only_the_first_problems() -> None:
    first = list(load_problems("single-line", 3))
    assert [p.task_id for p in first] == [
        "SingleLineInfilling/HumanEval/0/L0",
        "SingleLineInfilling/HumanEval/0/L1",
        "SingleLineInfilling/HumanEval/0/L2",
    ]


def test_the_licence_ships_beside_the_data() -> None:
    data = resources.files("anyfill.daemon.evaluation").joinpath("data")
    assert "MIT License" in data.joinpath("LICENSE").read_text()
    assert "Copyright (c) OpenAI" in data.joinpath("LICENSE").read_text()
    assert "human-eval-infilling" in data.joinpath("SOURCE.md").read_text()


def test_a_missing_line_is_asked_as_an_empty_line() -> None:
    problem = next(load_problems("single-line", 1))
    context = context_for(problem)
    assert context.prefix == problem.prompt
    assert context.suffix == "\n" + problem.suffix  # the caret on its own empty line
    middle = problem.canonical_solution.removesuffix("\n")
    program = program_for(problem, middle)
    assert program.startswith(problem.prompt + problem.canonical_solution + problem.suffix)
    assert program.endswith(f"check({problem.entry_point})\n")


def test_a_random_span_is_asked_as_it_is() -> None:
    problem = next(p for p in load_problems("random-span") if not p.whole_lines)
    context = context_for(problem)
    assert (context.prefix, context.suffix) == (problem.prompt, problem.suffix)

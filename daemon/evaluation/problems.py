"""The HumanEval infilling problems shipped with anyfill (``data/``, MIT, see SOURCE.md).

The four gzip JSONL files are read only when a suite is asked for, one problem at a time.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Literal, get_args

__all__ = ["SUITES", "Problem", "Suite", "load_problems", "suite_file"]

Suite = Literal["single-line", "multi-line", "random-span", "random-span-light"]
SUITES: tuple[Suite, ...] = get_args(Suite)

_FILES: dict[Suite, str] = {
    "single-line": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi-line": "HumanEval-MultiLineInfilling.jsonl.gz",
    "random-span": "HumanEval-RandomSpanInfilling.jsonl.gz",
    "random-span-light": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}


@dataclass(frozen=True)
class Problem:
    """One hole: ``prompt`` (the prefix), the ``canonical_solution`` (the middle) and the
    ``suffix``; ``test`` defines ``check(candidate)``, run on ``entry_point``."""

    task_id: str
    entry_point: str
    prompt: str
    suffix: str
    canonical_solution: str
    test: str

    @property
    def whole_lines(self) -> bool:
        """The hole is whole lines (the line-based suites): the prefix ends a line and the
        middle ends with its own newline."""
        return self.prompt.endswith("\n") and self.canonical_solution.endswith("\n")


def suite_file(suite: Suite) -> str:
    return _FILES[suite]


def load_problems(suite: Suite, limit: int | None = None) -> Iterator[Problem]:
    """The suite's problems in file order, the first ``limit`` of them when given."""
    data = resources.files("anyfill.daemon.evaluation").joinpath("data", _FILES[suite])
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        for count, line in enumerate(lines):
            if limit is not None and count >= limit:
                return
            item = json.loads(line)
            yield Problem(
                task_id=item["task_id"],
                entry_point=item["entry_point"],
                prompt=item["prompt"],
                suffix=item["suffix"],
                canonical_solution=item["canonical_solution"],
                test=item["test"],
            )

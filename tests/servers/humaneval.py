"""A llama.cpp server that answers HumanEval infilling problems from an answer key.

``AnswerKey(problems, answer)`` looks up the problem each request asks about, by the
prefix and suffix it carries (``/infill``'s ``input_prefix``/``input_suffix``, or the
StarCoder-templated prompt of ``/completion`` and of ``/v1/completions``, one prompt or a
prompt list), and answers ``answer(problem)``: the canonical solution scores 100%, a wrong
line ~0%. Anything else is what :class:`LlamaCpp` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from anyfill.daemon.evaluation.problems import Problem
from anyfill.daemon.evaluation.runner import context_for
from tests.servers.http import RecordedRequest, Response
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

_STARCODER = re.compile(r"<fim_prefix>(.*)<fim_suffix>(.*)<fim_middle>", re.DOTALL)
UNKNOWN = "# not a problem of the suite\n"


def canonical(problem: Problem) -> str:
    return problem.canonical_solution


def wrong(problem: Problem) -> str:
    """A line no canonical solution has, indented like the canonical one."""
    indent = problem.canonical_solution[
        : len(problem.canonical_solution) - len(problem.canonical_solution.lstrip())
    ]
    return f"{indent}raise NotImplementedError('wrong answer')\n"


class AnswerKey(LlamaCpp):
    def __init__(
        self,
        problems: Iterable[Problem],
        answer: Callable[[Problem], str] = canonical,
        *,
        delay_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.answer = answer
        self.delay_s = delay_s
        self.by_context: dict[tuple[str, str], Problem] = {}
        for problem in problems:
            context = context_for(problem)
            self.by_context[(context.prefix, context.suffix)] = problem
        self.asked: list[str] = []
        """Task ids in the order they were asked."""

    def _text(self, prefix: str, suffix: str) -> str:
        problem = self.by_context.get((prefix, suffix))
        if problem is None:
            return UNKNOWN
        self.asked.append(problem.task_id)
        return self.answer(problem)

    def _templated(self, prompt: str) -> str:
        match = _STARCODER.fullmatch(prompt)
        return self._text(match[1], match[2]) if match else UNKNOWN

    def reply_for(self, path: str, body: dict[str, Any]) -> Reply | None:
        if path == "/infill":
            text = self._text(str(body.get("input_prefix")), str(body.get("input_suffix")))
            return Reply(text=text, delay_s=self.delay_s)
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            texts = [self._templated(str(p)) for p in prompt]
            return Reply(batch=texts, delay_s=self.delay_s)
        if isinstance(prompt, str):
            return Reply(text=self._templated(prompt), delay_s=self.delay_s)
        return None

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        if request.method == "POST" and request.path in (
            "/infill",
            "/completion",
            "/v1/completions",
        ):
            reply = self.reply_for(request.path, request.json() or {})
            if reply is not None:
                # LlamaCpp takes the next reply before its first await: this very request's.
                self.push(reply)
        await super().__call__(request, response)

"""Running a suite through the engine, one backend after another.

Each problem is one ``batch`` request, as ``anyfill complete --jsonl`` sends them: the
scheduler's limits and cooldowns hold, prompt-list backends batch them, a "later" from a
server is waited out. A backend gets as many requests in flight as its ``max_concurrent``
allows (so the latency is a press's, not a queue's). With a sandbox, each finished middle
is then run against the problem's test.

A hole of the line-based suites is whole lines; it is shown to the engine as an editor
shows it, an empty line: the suffix starts with the newline that ends the missing line and
the middle comes back without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from anyfill.config.model import Settings
from anyfill.daemon.backends.base import Backend
from anyfill.daemon.completion import Completion, CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.engine.patience import (
    MAX_BATCH_CONCURRENCY,
    RatePacer,
    complete_patiently,
)
from anyfill.daemon.errors import AnyfillError, error_text
from anyfill.daemon.evaluation.problems import Problem, Suite
from anyfill.daemon.evaluation.sandbox import Outcome, Sandbox
from anyfill.daemon.evaluation.scoring import edit_similarity, exact_match
from anyfill.daemon.log import redact
from anyfill.daemon.scheduler import build_scheduler
from anyfill.daemon.scheduler.cache import CompletionCache
from anyfill.daemon.scheduler.scheduler import Scheduler

__all__ = ["EvalRun", "ProblemResult", "context_for", "program_for"]

log = logging.getLogger("anyfill.eval")


@dataclass
class ProblemResult:
    """What one backend made of one problem (a line of the per-problem JSONL)."""

    backend: str
    task_id: str
    middle: str | None
    error: str | None
    ms: float | None
    first_token_ms: float | None
    exact_match: bool
    edit_similarity: float
    prompt_tokens: int | None
    completion_tokens: int | None
    mode: str | None
    template: str | None
    passed: bool | None = None
    """``None`` unless executed."""
    outcome: Outcome | None = None
    detail: str = ""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def context_for(problem: Problem) -> Context:
    suffix = "\n" + problem.suffix if problem.whole_lines else problem.suffix
    return Context(prefix=problem.prompt, suffix=suffix, method="cli", language="Python")


def program_for(problem: Problem, middle: str) -> str:
    """The file a test runs: prefix + middle + suffix (the suffix the engine saw), the test
    and the call of its check, as the benchmark's own harness builds it."""
    context = context_for(problem)
    return (
        f"{context.prefix}{middle}{context.suffix}\n{problem.test}\ncheck({problem.entry_point})\n"
    )


def single_line_for(suite: Suite) -> bool:
    """A single-line hole is one line (a press with ``single_line = "always"``); the other
    suites' holes may span lines (``"never"``)."""
    return suite == "single-line"


class EvalRun:
    """One run: ``run`` fills ``results`` (per backend, in finishing order) and keeps them
    when stopped; ``stop()`` (Ctrl+C) cancels what is in flight."""

    def __init__(
        self,
        settings: Settings,
        suite: Suite,
        backends: Sequence[str],
        problems: Sequence[Problem],
        *,
        sandbox: Sandbox | None = None,
        max_tokens: int | None = None,
        on_result: Callable[[ProblemResult], None] = lambda result: None,
        on_progress: Callable[[str, int], None] = lambda backend, done: None,
    ) -> None:
        self.settings = settings
        self.suite = suite
        self.backends = tuple(backends)
        self.problems = tuple(problems)
        self.sandbox = sandbox
        self.max_tokens = max_tokens
        self.on_result = on_result
        self.on_progress = on_progress
        self.results: dict[str, list[ProblemResult]] = {name: [] for name in self.backends}
        self.wall_s: dict[str, float] = {}
        self.skipped: dict[str, str] = {}
        """Backends that failed their first problem, with its error: the rest not asked."""
        self.stopped = False
        self._tasks: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        self.stopped = True
        for task in list(self._tasks):
            task.cancel()

    async def run(self) -> None:
        schedulers: list[Scheduler] = []

        def uncached(backends: Mapping[str, Backend], settings: Settings) -> Scheduler:
            # The press's scheduler without its cache: the cache would answer a problem
            # from another one's completion (the multi-line holes of one task share their
            # suffix, and type-through serves the rest of a longer hole), so a score and a
            # latency would be the cache's, not the backend's.
            scheduler = build_scheduler(
                backends, settings, unusable=engine.unusable, cache=CompletionCache(0)
            )
            schedulers.append(scheduler)
            return scheduler

        engine = Engine(self.settings, uncached)
        try:
            async with engine:
                for name in self.backends:
                    if self.stopped:
                        break
                    await self._run_backend(engine, name)
        finally:
            for scheduler in schedulers:
                await scheduler.aclose()

    async def _run_backend(self, engine: Engine, name: str) -> None:
        """The completions first, then their tests: a local model's latency is not measured
        while the tests take its CPU."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        limit = self.settings.backend(name).limits.max_concurrent
        gate = asyncio.Semaphore(max(1, min(MAX_BATCH_CONCURRENCY, limit)))
        pacer = RatePacer(loop.time)  # one word on the backend's 429s for all its problems
        completed: list[tuple[Problem, ProblemResult]] = []

        async def complete(number: int, problem: Problem) -> None:
            async with gate:
                result = await self._complete(engine, name, number, problem, pacer)
            completed.append((problem, result))
            if self.sandbox is None:
                self._keep(result)
            self.on_progress(name, len(completed))

        numbered = list(enumerate(self.problems))
        # The first problem alone: it warms the backend up (template detection, a model
        # load), and a backend that fails it after every retry is down or misconfigured,
        # so the others are not each waited out (minutes for 1033 refused connections).
        await self._all(complete(number, problem) for number, problem in numbered[:1])
        first = completed[0][1] if completed else None
        if first is not None and first.error is not None:
            self.skipped[name] = first.error
            numbered = []
        await self._all(complete(number, problem) for number, problem in numbered[1:])
        self.wall_s[name] = loop.time() - started
        sandbox = self.sandbox
        if sandbox is None:
            return
        executions = asyncio.Semaphore(max(1, os.cpu_count() or 1))
        executed = 0

        async def execute(problem: Problem, result: ProblemResult) -> None:
            nonlocal executed
            if result.middle is None:
                result.passed, result.outcome, result.detail = False, "failed", "no middle"
            else:
                async with executions:
                    verdict = await sandbox.run(program_for(problem, result.middle))
                result.passed, result.outcome = verdict.passed, verdict.outcome
                result.detail = verdict.detail
            self._keep(result)
            executed += 1
            self.on_progress(f"{name} (tests)", executed)

        await self._all(execute(problem, result) for problem, result in completed)
        if self.stopped:  # the middles whose test did not run are kept, untested
            kept = {id(result) for result in self.results[name]}
            for _, result in completed:
                if id(result) not in kept:
                    self._keep(result)

    def _keep(self, result: ProblemResult) -> None:
        self.results[result.backend].append(result)
        self.on_result(result)

    async def _all(self, jobs: Iterable[Coroutine[None, None, None]]) -> None:
        """Run the jobs at once; ``stop()`` cancels them and what finished stays."""
        if self.stopped:
            for job in jobs:
                job.close()
            return
        for job in jobs:
            task = asyncio.create_task(job)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _complete(
        self, engine: Engine, name: str, number: int, problem: Problem, pacer: RatePacer
    ) -> ProblemResult:
        request = CompletionRequest(
            context_for(problem),
            id=f"eval-{name}-{number}",
            priority="batch",
            backends=(name,),
            max_tokens=self.max_tokens,
            single_line=single_line_for(self.suite),
        )
        try:
            completion = await complete_patiently(engine, request, asyncio.sleep, pacer)
        except AnyfillError as exc:
            log.info("%s failed on %s: %s", name, problem.task_id, error_text(exc))
            return self._failed(name, problem, redact(error_text(exc)))
        return self._scored(name, problem, completion)

    def _scored(self, name: str, problem: Problem, done: Completion) -> ProblemResult:
        expected = problem.canonical_solution
        return ProblemResult(
            backend=name,
            task_id=problem.task_id,
            middle=done.middle,
            error=None,
            ms=round(done.ms, 1),
            first_token_ms=(
                round(done.first_token_ms, 1) if done.first_token_ms is not None else None
            ),
            exact_match=exact_match(done.middle, expected, self.suite),
            edit_similarity=round(edit_similarity(done.middle, expected, self.suite), 4),
            prompt_tokens=done.usage.prompt_tokens,
            completion_tokens=done.usage.completion_tokens,
            mode=done.plan.mode,
            template=done.plan.template or None,
        )

    def _failed(self, name: str, problem: Problem, error: str) -> ProblemResult:
        return ProblemResult(
            backend=name,
            task_id=problem.task_id,
            middle=None,
            error=error,
            ms=None,
            first_token_ms=None,
            exact_match=False,
            edit_similarity=0.0,
            prompt_tokens=None,
            completion_tokens=None,
            mode=None,
            template=None,
        )

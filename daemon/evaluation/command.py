"""``anyfill eval``: choose the backends and the suite, run, print and write the results."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

import click

from anyfill.config.model import Settings
from anyfill.config.secrets import resolve_api_key
from anyfill.daemon.evaluation.problems import Suite, load_problems
from anyfill.daemon.evaluation.runner import EvalRun, ProblemResult
from anyfill.daemon.evaluation.sandbox import Sandbox
from anyfill.daemon.evaluation.scoring import RULES
from anyfill.daemon.evaluation.summary import (
    REFERENCE_SOURCE,
    REFERENCES,
    BackendSummary,
    render_table,
    summarise,
)
from anyfill.daemon.log import setup_logging

__all__ = ["EXIT_STOPPED", "EvalArgs", "run_eval"]

EXIT_OK = 0
EXIT_NOTHING_ANSWERED = 1
EXIT_STOPPED = 130
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "eval.png"


@dataclass(frozen=True)
class EvalArgs:
    suite: Suite = "single-line"
    backends: tuple[str, ...] = ()
    limit: int | None = None
    execute: bool = False
    time_limit_s: float = 5.0
    max_tokens: int | None = None
    out: Path | None = None
    as_json: bool = False


def choose_backends(settings: Settings, asked: tuple[str, ...]) -> tuple[str, ...]:
    """The backends named (each once, in order), else the first of the routing chain."""
    enabled = [b.name for b in settings.backends if b.enabled]
    if not asked:
        first = [name for name in settings.routing.default if name in enabled][:1]
        if not first:
            raise click.UsageError(
                "no backend to evaluate: name one with --backend NAME "
                f"(configured: {', '.join(enabled) or 'none'})"
            )
        asked = tuple(first)
    for name in asked:
        if name not in enabled:
            raise click.UsageError(
                f"no enabled backend named '{name}' (configured: {', '.join(enabled) or 'none'})"
            )
        resolve_api_key(settings.backend(name))  # a missing key fails now, not 1033 times
    return tuple(dict.fromkeys(asked))


def run_eval(
    load_settings: Callable[[], Settings],
    args: EvalArgs,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    debug: bool = False,
) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    settings = load_settings()
    backends = choose_backends(settings, args.backends)
    logs = settings.logging
    setup_logging(
        level="DEBUG" if debug else logs.level,
        to_file=logs.file,
        max_bytes=logs.max_bytes,
        backups=logs.backups,
        log_text=settings.privacy.log_text,
        stderr_level="DEBUG" if debug else "ERROR",
    )
    problems = list(load_problems(args.suite, args.limit))
    sandbox = Sandbox(time_limit_s=args.time_limit_s) if args.execute else None
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    progress = _Progress(stderr, len(problems))
    with _results_file(args.out) as results_file:

        def keep(result: ProblemResult) -> None:
            if results_file is not None:
                results_file.write(json.dumps(result.as_json(), ensure_ascii=False) + "\n")
                results_file.flush()  # a killed run keeps every finished line

        run = EvalRun(
            settings,
            args.suite,
            backends,
            problems,
            sandbox=sandbox,
            max_tokens=args.max_tokens,
            on_result=keep,
            on_progress=progress.update,
        )
        try:
            asyncio.run(_run_until_stopped(run, stderr))
        finally:
            progress.close()
    summaries = [
        summarise(
            name, run.results[name], len(problems), run.wall_s.get(name), run.skipped.get(name)
        )
        for name in backends
    ]
    report = _report(args, run, summaries, sandbox)
    files = _write_outputs(args, report, summaries, stderr)
    report["files"] = files
    if args.as_json:
        stdout.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.write(
            render_table(args.suite, summaries, executed=args.execute, stopped=run.stopped)
        )
        if sandbox is not None:
            stdout.write(
                f"tests: {sandbox.time_limit_s:g} s each, network kept away by "
                f"{sandbox.isolation}\n"
            )
        for kind, path in files.items():
            stdout.write(f"{kind}: {path}\n")
    stdout.flush()
    if run.stopped:
        return EXIT_STOPPED
    if problems and any(s.answered == 0 for s in summaries):
        return EXIT_NOTHING_ANSWERED
    return EXIT_OK


async def _run_until_stopped(run: EvalRun, stderr: IO[str]) -> None:
    """Ctrl+C stops the run and keeps what finished; a second one ends it at once."""
    loop = asyncio.get_running_loop()

    def interrupted() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        stderr.write("\nstopping: the finished problems are kept (Ctrl+C again to quit)\n")
        stderr.flush()
        run.stop()

    loop.add_signal_handler(signal.SIGINT, interrupted)
    try:
        await run.run()
    finally:
        loop.remove_signal_handler(signal.SIGINT)


@contextlib.contextmanager
def _results_file(out: Path | None) -> Iterator[IO[str] | None]:
    if out is None:
        yield None
        return
    with (out / RESULTS_FILE).open("w", encoding="utf-8") as file:
        yield file


class _Progress:
    """A progress bar on stderr, only when it is a terminal."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.shown = stream.isatty()
        self.label = ""
        self.bar: Any = None

    def update(self, label: str, done: int) -> None:
        if not self.shown:
            return
        if label != self.label:
            self.close()
            self.label = label
            self.bar = click.progressbar(
                length=self.total, label=label, file=self.stream, show_pos=True, show_eta=True
            )
            self.bar.__enter__()
        self.bar.update(done - self.bar.pos)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _report(
    args: EvalArgs, run: EvalRun, summaries: list[BackendSummary], sandbox: Sandbox | None
) -> dict[str, Any]:
    return {
        "suite": args.suite,
        "rule": RULES[args.suite],
        "problems": len(run.problems),
        "stopped": run.stopped,
        "execute": (
            {"time_limit_s": sandbox.time_limit_s, "isolation": sandbox.isolation}
            if sandbox is not None
            else None
        ),
        "backends": [s.as_json() for s in summaries],
        "references": (
            {
                "source": REFERENCE_SOURCE,
                "exact_match": [{"model": name, "score": score} for name, score in REFERENCES],
            }
            if args.suite == "single-line"
            else None
        ),
    }


def _write_outputs(
    args: EvalArgs, report: dict[str, Any], summaries: list[BackendSummary], stderr: IO[str]
) -> dict[str, str]:
    if args.out is None:
        return {}
    files = {"results": str(args.out / RESULTS_FILE)}
    summary = args.out / SUMMARY_FILE
    summary.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    files["summary"] = str(summary)
    from anyfill.daemon.evaluation.plot import PlotUnavailable, write_plot

    try:
        write_plot(args.out / PLOT_FILE, args.suite, summaries)
        files["plot"] = str(args.out / PLOT_FILE)
    except PlotUnavailable as exc:
        stderr.write(f"anyfill eval: {exc}\n")
    return files

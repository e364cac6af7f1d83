"""The numbers of a run per backend, the table people read and the JSON scripts read."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from anyfill.daemon.evaluation.problems import Suite
from anyfill.daemon.evaluation.runner import ProblemResult
from anyfill.daemon.evaluation.scoring import RULES

__all__ = ["REFERENCES", "BackendSummary", "render_table", "summarise"]

REFERENCES: tuple[tuple[str, float], ...] = (
    ("Qwen2.5-Coder-0.5B base", 70.3),
    ("Qwen2.5-Coder-1.5B base", 77.0),
    ("StarCoder2-3B", 70.9),
    ("DeepSeek-Coder-1.3B base", 72.8),
)
"""Published single-line exact match, Python (Qwen2.5-Coder technical report, Table 7)."""
REFERENCE_SOURCE = "Qwen2.5-Coder technical report, single-line exact match, Python"


@dataclass(frozen=True)
class BackendSummary:
    backend: str
    problems: int
    """How many the run asked for."""
    answered: int
    failed: int
    """Requests that ended in an error (they count as misses)."""
    exact_match: float | None
    """Percent of the finished problems."""
    edit_similarity: float | None
    pass_at_1: float | None
    """Percent of the executed problems; ``None`` unless ``--execute``."""
    executed: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    prompt_tokens: int
    completion_tokens: int
    wall_s: float | None
    skipped: str | None = None
    """Why the problems after the first were not asked (its error), if they were not."""

    def as_json(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "problems": self.problems,
            "finished": self.answered + self.failed,
            "answered": self.answered,
            "failed": self.failed,
            "exact_match": self.exact_match,
            "edit_similarity": self.edit_similarity,
            "pass_at_1": self.pass_at_1,
            "executed": self.executed,
            "latency_ms": {"p50": self.latency_p50_ms, "p95": self.latency_p95_ms},
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "wall_s": self.wall_s,
            "skipped": self.skipped,
        }


def _percentile(values: Sequence[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 1)


def _percent(part: float, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def summarise(
    backend: str,
    results: Sequence[ProblemResult],
    problems: int,
    wall_s: float | None,
    skipped: str | None = None,
) -> BackendSummary:
    finished = len(results)
    answered = [r for r in results if r.error is None]
    executed = [r for r in results if r.passed is not None]
    latencies = [r.ms for r in answered if r.ms is not None]
    return BackendSummary(
        backend=backend,
        problems=problems,
        answered=len(answered),
        failed=finished - len(answered),
        exact_match=_percent(sum(r.exact_match for r in results), finished),
        edit_similarity=_percent(sum(r.edit_similarity for r in results), finished),
        pass_at_1=_percent(sum(bool(r.passed) for r in executed), len(executed)),
        executed=len(executed),
        latency_p50_ms=_percentile(latencies, 50),
        latency_p95_ms=_percentile(latencies, 95),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in answered),
        completion_tokens=sum(r.completion_tokens or 0 for r in answered),
        wall_s=round(wall_s, 2) if wall_s is not None else None,
        skipped=skipped,
    )


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


def render_table(
    suite: Suite, summaries: Sequence[BackendSummary], *, executed: bool, stopped: bool
) -> str:
    """The summary people read: one row per backend, the rule, the published references."""
    header = ["backend", "done", "exact match", "edit sim."]
    if executed:
        header.append("pass@1")
    header += ["p50 ms", "p95 ms", "tokens in/out", "wall s"]
    rows = [header]
    for s in summaries:
        row = [
            s.backend,
            f"{s.answered + s.failed}/{s.problems}" + (f" ({s.failed} failed)" if s.failed else ""),
            _cell(s.exact_match, "%"),
            _cell(s.edit_similarity, "%"),
        ]
        if executed:
            row.append(_cell(s.pass_at_1, "%"))
        row += [
            _cell(s.latency_p50_ms),
            _cell(s.latency_p95_ms),
            f"{s.prompt_tokens}/{s.completion_tokens}",
            _cell(s.wall_s),
        ]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    out = [
        f"HumanEval infilling, {suite}" + (" (stopped: the finished problems)" if stopped else "")
    ]
    out += lines
    out += [
        f"{s.backend}: failed its first problem, the others were not asked: {s.skipped}"
        for s in summaries
        if s.skipped
    ]
    out.append(f"rule: {RULES[suite]}")
    if suite == "single-line":
        out.append(f"published references ({REFERENCE_SOURCE}):")
        out += [f"  {name:<26} {score:.1f}%" for name, score in REFERENCES]
    return "\n".join(out) + "\n"

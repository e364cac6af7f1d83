"""The PNG of a run: exact match (and pass@1) and latency per backend, side by side.

matplotlib is the optional ``eval`` extra (``pip install 'anyfill[eval]'``): ``anyfill
eval`` is a command line tool that may run where no display and no Qt platform plugin
exist, and matplotlib's Agg renderer needs neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from anyfill.daemon.evaluation.problems import Suite
from anyfill.daemon.evaluation.summary import REFERENCE_SOURCE, REFERENCES, BackendSummary

__all__ = ["PlotUnavailable", "write_plot"]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def write_plot(path: Path, suite: Suite, summaries: Sequence[BackendSummary]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display, no GUI toolkit
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(
            "no plot: matplotlib is not installed (pip install 'anyfill[eval]')"
        ) from exc

    names = [s.backend for s in summaries]
    positions = list(range(len(names)))
    figure, (scores, latency) = plt.subplots(1, 2, figsize=(4 + 2.2 * len(names), 4.5))
    try:
        executed = any(s.pass_at_1 is not None for s in summaries)
        width = 0.38 if executed else 0.6
        shift = width / 2 if executed else 0.0
        em = [s.exact_match or 0.0 for s in summaries]
        bars = scores.bar([p - shift for p in positions], em, width, label="exact match")
        scores.bar_label(bars, fmt="%.1f")
        if executed:
            passes = [s.pass_at_1 or 0.0 for s in summaries]
            bars = scores.bar([p + shift for p in positions], passes, width, label="pass@1")
            scores.bar_label(bars, fmt="%.1f")
        if suite == "single-line":
            for number, (name, value) in enumerate(REFERENCES):
                scores.axhline(value, linestyle=":", linewidth=1, color=f"C{number + 2}")
                scores.annotate(
                    f"{name} {value:g}",
                    (1.0, value),
                    xycoords=("axes fraction", "data"),
                    fontsize=7,
                    ha="right",
                    va="bottom",
                    color=f"C{number + 2}",
                )
            scores.set_xlabel(f"dotted: {REFERENCE_SOURCE}", fontsize=7)
        scores.set_xticks(positions, names, rotation=15)
        scores.set_ylim(0, 105)
        scores.set_ylabel("%")
        scores.set_title(f"HumanEval infilling, {suite}")
        scores.legend(loc="upper left", fontsize=8)

        p50 = [s.latency_p50_ms or 0.0 for s in summaries]
        p95 = [s.latency_p95_ms or 0.0 for s in summaries]
        latency.bar(positions, p95, 0.6, color="C1", alpha=0.35, label="p95")
        bars = latency.bar(positions, p50, 0.6, color="C1", label="p50")
        latency.bar_label(bars, fmt="%.0f")
        latency.set_xticks(positions, names, rotation=15)
        latency.set_ylabel("ms per problem")
        latency.set_title("latency")
        latency.legend(loc="upper left", fontsize=8)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)

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
    figure, (scores, latency) = plt.subplots(1, 2, figsize=(5 + 2.2 * len(names), 5.5))
    try:
        executed = any(s.pass_at_1 is not None for s in summaries)
        width = 0.38 if executed else 0.6
        shift = width / 2 if executed else 0.0
        em = [s.exact_match or 0.0 for s in summaries]
        bars = scores.bar([p - shift for p in positions], em, width, label="exact match")
        scores.bar_label(bars, fmt="%.1f")
        if executed:
            passes = [s.pass_at_1 for s in summaries]  # None: that backend was not tested
            bars = scores.bar(
                [p + shift for p in positions], [v or 0.0 for v in passes], width, label="pass@1"
            )
            scores.bar_label(bars, labels=["" if v is None else f"{v:.1f}" for v in passes])
        if suite == "single-line":
            for number, (name, value) in enumerate(REFERENCES):
                scores.axhline(
                    value,
                    linestyle=":",
                    linewidth=1.2,
                    color=f"C{number + 2}",
                    label=f"{name}: {value:g}",
                )
        scores.set_xticks(positions, names, rotation=15)
        scores.set_ylim(0, 105)
        scores.set_ylabel("%")
        scores.set_title(f"HumanEval infilling, {suite}")
        # Below the axes: the bars reach 100 and the reference lines sit close together.
        scores.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.14),
            fontsize=7,
            ncol=2,
            title=f"dotted: {REFERENCE_SOURCE}" if suite == "single-line" else None,
            title_fontsize=7,
        )

        p50 = [s.latency_p50_ms or 0.0 for s in summaries]
        p95 = [s.latency_p95_ms or 0.0 for s in summaries]
        latency.bar(positions, p95, 0.6, color="C1", alpha=0.35, label="p95")
        bars = latency.bar(positions, p50, 0.6, color="C1", label="p50")
        latency.bar_label(bars, fmt="%.0f")
        latency.set_xticks(positions, names, rotation=15)
        latency.set_ylabel("ms per problem")
        latency.set_title("latency")
        latency.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, ncol=2)
        figure.tight_layout()
        figure.savefig(path, dpi=110, bbox_inches="tight")  # the legends below the axes
    finally:
        plt.close(figure)

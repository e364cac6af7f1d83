"""The request-path benchmarks behind ``anyfill bench`` (and the scripts in ``bench/``).

Each prints figures as ratios against a baseline measured in the same run; none is a
pass/fail test. See docs/scheduler.md for what each one measures and how.
"""

from __future__ import annotations

from collections.abc import Sequence

from anyfill.bench.harness import Say, quiet

__all__ = ["BENCHMARKS", "run_benchmarks"]

BENCHMARKS = ("p2", "p3", "p4", "p6", "mqtt")


def run_benchmarks(
    names: Sequence[str], *, quick: bool = False, peers: bool = True, say: Say = quiet
) -> None:
    """Run the named benchmarks ("all" for every one) and ``say`` their reports."""
    chosen = BENCHMARKS if "all" in names else tuple(n for n in BENCHMARKS if n in names)
    for name in chosen:
        say(f"{name}: running{' (quick)' if quick else ''} ...")
        if name == "p2":
            from anyfill.bench import p2

            if quick:
                report = p2.run(reps=3, c1_requests=40, c32_requests=128, peers=peers, say=say)
            else:
                report = p2.run(peers=peers, say=say)
        elif name == "p3":
            from anyfill.bench import p3

            report = p3.run(samples=30 if quick else 200, say=say)
        elif name == "p4":
            from anyfill.bench import p4

            report = p4.run(reps=2 if quick else 7, say=say)
        elif name == "p6":
            from anyfill.bench import p6

            report = p6.run(say=say)
        else:
            from anyfill.bench import mqtt

            report = mqtt.run(quick=quick, say=say)
        say(report)
        say("")

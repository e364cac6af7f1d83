"""Recovery and keep rates of the exact middle on real code.

Cuts N random spans (seeded) of each corpus (``stdlib``: the Python standard library, where
the rules were developed; ``project``: this project's own code, held out), injects each fault
of ``tests/unit/fim/real_code.py`` and runs the answer through the native and the chat
paths, in multi-line mode and in single-line mode (a hole inside one line, as ``auto``
chooses when text follows the caret). Prints, per row, the share of answers that came back as
exactly the true middle, over every cut and over the cuts where the true middle does not
itself look like the fault ("fair"), the totals of faulty and clean answers over the
fair cuts, and the first ``MISSES_SHOWN`` misses on fair cuts (the end of the prefix, the
true middle, the raw answer, what was inserted, the start of the suffix).

    python -m bench.fim_exact_middle [N] [SEED] [CORPUS]
"""

from __future__ import annotations

import random
import sys

from tests.unit.fim.real_code import CORPORA, FAULTS, chat_can_carry, cut_for, fair, faulty, through

#: Faults that need a hole ending at a line end: there is no such hole in single-line mode.
MULTI_LINE_ONLY = frozenset({"trailing_newline"})
MISSES_SHOWN = 20


def main(n: int = 3000, seed: int = 1, corpus: str = "") -> None:
    print(
        f"{'corpus':8} {'path':7} {'mode':6} {'fault':19} {'cases':>6} {'exact %':>8} "
        f"{'fair':>6} {'fair exact %':>13}"
    )
    totals: dict[tuple[str, bool], list[int]] = {}
    misses: list[str] = []
    for name in (corpus,) if corpus else CORPORA:
        for path in ("native", "chat"):
            for single in (False, True):
                rng = random.Random(seed)
                for fault in FAULTS:
                    if single and fault in MULTI_LINE_ONLY:
                        continue
                    mode = "1-line" if single else "multi"
                    where = f"{name} {path} {mode} {fault}"
                    row = _row(rng, n, name, path, fault, single=single, misses=(where, misses))
                    total, exact, fair_total, fair_exact = row
                    print(
                        f"{name:8} {path:7} {mode:6} {fault:19} {total:6} "
                        f"{100 * exact / max(total, 1):8.2f} {fair_total:6} "
                        f"{100 * fair_exact / max(fair_total, 1):13.2f}"
                    )
                    sums = totals.setdefault((name, fault == "clean"), [0, 0])
                    sums[0] += fair_total
                    sums[1] += fair_exact
    for (name, clean), (count, ok) in sorted(totals.items()):
        what = "clean answers kept" if clean else "faulty answers recovered"
        print(f"{name}: {what}: {ok}/{count} = {100 * ok / max(count, 1):.2f} % (fair cuts)")
    shown = misses[:MISSES_SHOWN]
    print(f"misses on fair cuts: {len(misses)}" + (f", the first {len(shown)}:" if shown else ""))
    for miss in shown:
        print(miss)


def _row(
    rng: random.Random,
    n: int,
    corpus: str,
    path: str,
    fault: str,
    *,
    single: bool,
    misses: tuple[str, list[str]],
) -> tuple[int, int, int, int]:
    total = exact = fair_total = fair_exact = 0
    for _ in range(n):
        hole = cut_for(fault, rng, corpus=corpus, one_line=single)
        raw = faulty(hole, fault, path)
        if raw is None or (path == "chat" and not chat_can_carry(raw)):
            continue
        got = through(path, hole, raw, single_line=single)
        ok = got == hole.middle
        total += 1
        exact += ok
        if fair(hole):
            fair_total += 1
            fair_exact += ok
            if not ok:
                where, found = misses
                found.append(
                    f"  {where}: prefix ...{hole.prefix[-60:]!r} middle {hole.middle!r} "
                    f"raw {raw[:200]!r} inserted {got!r} suffix {hole.suffix[:80]!r}..."
                )
    return total, exact, fair_total, fair_exact


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*(int(arg) for arg in args[:2]), *args[2:3])

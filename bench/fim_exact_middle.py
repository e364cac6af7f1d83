"""Recovery and keep rates of the exact middle on real code (the standard library).

Cuts N random spans (seeded), injects each fault of ``tests/unit/fim/real_code.py`` and
runs the answer through the native and the chat paths. Prints, per path and fault, the
share of answers that came back as exactly the true middle, over every cut and over the
cuts where the true middle does not itself look like the fault ("fair").

    python -m bench.fim_exact_middle [N] [SEED]
"""

from __future__ import annotations

import random
import sys

from tests.unit.fim.real_code import FAULTS, cut, fair, faulty, through


def main(n: int = 3000, seed: int = 1) -> None:
    rng = random.Random(seed)
    print(f"{'path':7} {'fault':16} {'cases':>6} {'exact %':>8} {'fair':>6} {'fair exact %':>13}")
    for path in ("native", "chat"):
        for fault in FAULTS:
            total = exact = fair_total = fair_exact = 0
            for _ in range(n):
                hole = cut(rng, at_line_end=fault == "trailing_newline")
                raw = faulty(hole, fault, path)
                if raw is None or (path == "chat" and raw.startswith("\n") and raw.endswith("\n")):
                    continue
                ok = through(path, hole, raw) == hole.middle
                total += 1
                exact += ok
                if fair(hole):
                    fair_total += 1
                    fair_exact += ok
            print(
                f"{path:7} {fault:16} {total:6} {100 * exact / max(total, 1):8.2f} "
                f"{fair_total:6} {100 * fair_exact / max(fair_total, 1):13.2f}"
            )


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))

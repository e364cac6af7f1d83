"""P6: the rate limiter under 10x overload.

Same as ``anyfill bench p6``; ``--quick`` for a rough figure sooner.
Run it when the machine is quiet and repeat it: the figures are ratios measured in one run.
"""

import sys

from anyfill.bench import run_benchmarks

if __name__ == "__main__":
    run_benchmarks(
        ["p6"], quick="--quick" in sys.argv, peers="--no-peers" not in sys.argv, say=print
    )

"""P2: client cost per request (scheduler + HTTP) vs raw httpx/aiohttp, the openai SDK and LiteLLM.

Same as ``anyfill bench p2``; ``--quick`` for a rough figure sooner.
Run it when the machine is quiet and repeat it: the figures are ratios measured in one run.
"""

import sys

from anyfill.bench import run_benchmarks

if __name__ == "__main__":
    run_benchmarks(
        ["p2"], quick="--quick" in sys.argv, peers="--no-peers" not in sys.argv, say=print
    )

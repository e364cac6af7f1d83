"""MQTT worker pools: added latency and one worker's throughput vs the direct path, and the
pool under load (2 workers, 20 desktops, 2,000 requests, random cancels, a worker killed).

Same as ``anyfill bench mqtt``; ``--quick`` for a rough figure sooner. Needs mosquitto.
"""

import sys

from anyfill.bench import run_benchmarks

if __name__ == "__main__":
    run_benchmarks(["mqtt"], quick="--quick" in sys.argv, say=print)

"""Cost of one long stream line: fed in 64 KiB network reads vs in one read (the baseline of
the same run). Linear splitting keeps the ratio near 1; re-scanning the pending buffer on
every read (the old splitter) made it grow with the line.

    python -m bench.line_splitter [MiB]
"""

from __future__ import annotations

import sys
import time

from anyfill.daemon.backends.wire import MAX_LINE_BYTES, LineSplitter

READ = 64 * 1024


def split(data: bytes, read: int) -> float:
    splitter = LineSplitter()
    started = time.perf_counter()
    for i in range(0, len(data), read):
        splitter.feed(data[i : i + read])
    return time.perf_counter() - started


def main(mib: float = 7.5) -> None:
    size = min(int(mib * 2**20), MAX_LINE_BYTES - 1)
    data = b"x" * size + b"\n"
    whole = min(split(data, len(data)) for _ in range(3))
    reads = min(split(data, READ) for _ in range(3))
    print(
        f"{size / 2**20:.1f} MiB line: one read {whole * 1e3:.1f} ms, "
        f"{len(data) // READ + 1} reads of 64 KiB {reads * 1e3:.1f} ms, ratio {reads / whole:.2f}"
    )


if __name__ == "__main__":
    main(*(float(arg) for arg in sys.argv[1:2]))

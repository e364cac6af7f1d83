"""The live-reload watcher with a 1 MiB config file: total time and the event loop's longest
stall, against the same file read and parsed on the loop (what the watcher did before).

    python bench/bench_reload.py [--runs 5]

A 1 MiB file is the most the watcher reads (``MAX_CONFIG_BYTES``): a valid config followed
by comment lines. Prints, per run and as medians, all measured in this run:

- ``on loop``: read + parse on the event loop (the baseline); the stall equals the time;
- ``watcher``: from the file's change to ``SettingsApplied`` through ``ConfigWatcher`` and
  ``Reloader`` (settle time excluded: measured from the read), and the longest gap a 5 ms
  heartbeat task saw meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anyfill.config.model import Settings  # noqa: E402
from anyfill.config.store import MAX_CONFIG_BYTES, parse_settings, read_config_text  # noqa: E402
from anyfill.daemon.bus import EventBus  # noqa: E402
from anyfill.daemon.settings.reload import ConfigWatcher, Reloader, SettingsApplied  # noqa: E402


def one_mib_config(max_tokens: int) -> str:
    head = (
        '[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "http://127.0.0.1:8080"\n'
        f'max_tokens = {max_tokens}\n[routing]\ndefault = ["local"]\n'
    )
    line = "# " + "x" * 61 + "\n"
    body = line * ((MAX_CONFIG_BYTES - len(head)) // len(line))
    return head + body


class Heartbeat:
    """The longest gap between ticks of a task that wants to run every 5 ms."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.005)
            now = loop.time()
            self.longest = max(self.longest, now - last - 0.005)
            last = now

    def __enter__(self) -> Heartbeat:
        self._task = asyncio.get_running_loop().create_task(self._beat())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def on_loop(path: Path) -> tuple[float, float]:
    with Heartbeat() as beat:
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        parse_settings(read_config_text(path), path=str(path), environ={})
        took = time.perf_counter() - started
        await asyncio.sleep(0.02)
    return took, beat.longest


async def watcher(path: Path, max_tokens: int) -> tuple[float, float]:
    bus = EventBus()
    events = bus.subscribe(SettingsApplied)
    read_at: list[float] = []

    async def apply(old: Settings, new: Settings) -> list[object]:
        return []

    reloader = Reloader(path, Settings(), apply, bus, environ={})

    async def on_text(text: str) -> None:
        await reloader.on_text(text)

    def timed_read(p: Path) -> str:
        read_at.append(time.perf_counter())
        return read_config_text(p)

    import anyfill.daemon.settings.reload as reload_module

    original = reload_module.read_config_text
    reload_module.read_config_text = timed_read
    try:
        async with ConfigWatcher(path, on_text, poll_s=0.01, settle_s=0.05):
            await asyncio.sleep(0.05)
            path.write_text(one_mib_config(max_tokens))  # noqa: ASYNC240 - what is timed
            with Heartbeat() as beat:
                await asyncio.wait_for(events.__anext__(), 30)
                done = time.perf_counter()
    finally:
        reload_module.read_config_text = original
    return done - read_at[-1], beat.longest


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text(one_mib_config(1))
        print(f"file: {path.stat().st_size} bytes")
        base: list[tuple[float, float]] = []
        new: list[tuple[float, float]] = []
        for run in range(runs):
            base.append(await on_loop(path))
            new.append(await watcher(path, 10 + run))
            print(
                f"run {run + 1}: on loop {base[-1][0] * 1000:.0f} ms (stall "
                f"{base[-1][1] * 1000:.0f} ms); watcher {new[-1][0] * 1000:.0f} ms, "
                f"longest stall {new[-1][1] * 1000:.1f} ms"
            )
        b_time = statistics.median(t for t, _ in base)
        b_stall = statistics.median(s for _, s in base)
        n_time = statistics.median(t for t, _ in new)
        n_stall = statistics.median(s for _, s in new)
        print(
            f"median: on loop {b_time * 1000:.0f} ms, stall {b_stall * 1000:.0f} ms; watcher "
            f"{n_time * 1000:.0f} ms ({n_time / b_time:.2f}x), longest stall "
            f"{n_stall * 1000:.1f} ms ({n_stall / b_stall:.3f}x)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args().runs))

"""``anyfill worker``: logging, signals, and the worker until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import time
from dataclasses import replace

from anyfill.config.model import Settings
from anyfill.daemon.bus import EventBus
from anyfill.daemon.log import setup_logging

log = logging.getLogger("anyfill.worker")


def default_worker_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:48] or "worker"
    return f"{host}-{os.getpid()}"


def record_sends(bus: EventBus, path: str) -> None:
    """Append when each attempt went to a backend (``time.monotonic()``, one per line): the
    load benchmark checks the pool's limit against what the limiters let out."""
    from anyfill.daemon.scheduler.events import AttemptFinished

    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def on_attempt(event: AttemptFinished) -> None:
        if event.total_ms is not None:
            out.write(f"{time.monotonic() - event.total_ms / 1000:.6f}\n")

    bus.listen(on_attempt, AttemptFinished)


def run_worker(
    settings: Settings,
    pool: str,
    *,
    worker_id: str | None = None,
    batch_window_s: float = 0.0,
    limit_window_s: float = 60.0,
    sends_log: str | None = None,
    debug: bool = False,
) -> int:
    setup_logging(
        level="DEBUG" if debug else settings.logging.level,
        to_file=False,
        max_bytes=settings.logging.max_bytes,
        backups=settings.logging.backups,
        log_text=settings.privacy.log_text,
    )
    name = worker_id or default_worker_id()
    asyncio.run(
        _main(
            settings,
            pool=pool,
            worker_id=name,
            batch_window_s=batch_window_s,
            limit_window_s=limit_window_s,
            sends_log=sends_log,
        )
    )
    return 0


async def _main(
    settings: Settings,
    *,
    pool: str,
    worker_id: str,
    batch_window_s: float,
    limit_window_s: float,
    sends_log: str | None,
) -> None:
    from anyfill.daemon.mqtt.connection import spec_from_config
    from anyfill.daemon.worker.worker import Worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Its own client id: a desktop on the same host may use the [mqtt] one.
    spec = replace(spec_from_config(settings.mqtt), client_id=f"anyfill-worker-{worker_id}")
    bus = EventBus()
    if sends_log:
        record_sends(bus, sends_log)
    worker = Worker(
        settings,
        spec,
        pool,
        worker_id=worker_id,
        prefix=settings.mqtt.prefix,
        limit_window_s=limit_window_s,
        batch_window_s=batch_window_s,
        bus=bus,
    )
    log.info("worker %s for pool %s on %s", worker_id, pool, spec.url)
    await worker.run(stop)
    log.info(
        "worker %s stopped (%d answered, %d dropped)", worker_id, worker.answered, worker.dropped
    )

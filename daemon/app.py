"""The composition root: builds the daemon from the settings and owns start and stop."""

from __future__ import annotations

import asyncio
import logging
import signal

from anyfill.config.model import Settings
from anyfill.daemon.log import setup_logging

log = logging.getLogger("anyfill.app")


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set."""
    chain = ", ".join(settings.routing.default)
    log.info("anyfill is running; backends in order: %s", chain)
    await stop.wait()
    log.info("anyfill stopped")


def run_daemon(settings: Settings, *, headless: bool, debug: bool = False) -> None:
    path = setup_logging(
        level="DEBUG" if debug else settings.logging.level,
        to_file=settings.logging.file,
        max_bytes=settings.logging.max_bytes,
        backups=settings.logging.backups,
        log_text=settings.privacy.log_text,
    )
    if path:
        log.info("logging to %s", path)
    if not headless:
        log.warning("the tray is not available yet; running headless")
    asyncio.run(_main(settings))


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)

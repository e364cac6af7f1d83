"""Waiting for the first of several asyncio events, with or without a deadline."""

from __future__ import annotations

import asyncio


async def first_set(*events: asyncio.Event, timeout_s: float | None = None) -> bool:
    """True as soon as one of ``events`` is set, False once ``timeout_s`` has passed.

    A timeout of zero or less only looks whether one is set already.
    """
    if any(event.is_set() for event in events):
        return True
    if timeout_s is not None and timeout_s <= 0:
        return False
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(
            waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in waiters:
            waiter.cancel()
    return bool(done)

"""The clipboard keeper's messages: every format of a snapshot comes through whole, and a
message cut short by the daemon's death is never taken for a whole one."""

from __future__ import annotations

import asyncio

from anyfill.daemon.desktop.ports import ClipSnapshot
from anyfill.daemon.x11.keeper import TAKE_OVER, decode, encode


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_every_format_comes_through_whole() -> None:
    snapshot = ClipSnapshot(
        {
            "UTF8_STRING": ("UTF8_STRING", 8, "the user's text ✓".encode()),
            "image/png": ("image/png", 8, bytes(range(256)) * 1000),
            "ATOMS": ("ATOM", 32, (1, 2, 4_000_000_000)),
            "SHORTS": ("INTEGER", 16, (7, 65535)),
        }
    )
    reader = _reader(encode("primary", snapshot) + encode("clipboard", ClipSnapshot()))

    assert await decode(reader) == ("primary", snapshot)
    assert await decode(reader) == ("clipboard", ClipSnapshot())
    assert await decode(reader) is None


async def test_a_message_cut_short_is_no_message() -> None:
    whole = encode("clipboard", ClipSnapshot.from_text("x" * 10_000))
    for cut in (5, len(whole) // 2, len(whole) - 1):
        assert await decode(_reader(whole[:cut])) is None


async def test_the_take_over_request_is_told_from_content() -> None:
    snapshot = ClipSnapshot.from_text("the user's text")
    reader = _reader(encode("clipboard", snapshot) + TAKE_OVER + TAKE_OVER[:-1])

    assert await decode(reader) == ("clipboard", snapshot)
    assert await decode(reader) is True
    assert await decode(reader) is None  # cut short: no request

"""A busy target (issue 23: a new Mousepad window under load): it gets the paste keys only
once it has handled what it was sent before, and a paste it has begun (it asked for the
clipboard's formats) is waited for, not restored away under it."""

from __future__ import annotations

import asyncio

import pytest

from anyfill.daemon.desktop.ports import Desktop, Target
from anyfill.daemon.errors import InsertError
from tests.unit.desktop.fakes import FakeClipboard, FakeWindows, fake_desktop, paste_big

MOUSEPAD = Target(window_id=0x1200073, app="Mousepad", instance="mousepad", process="mousepad")


async def test_the_target_catches_up_before_the_paste_keys() -> None:
    plain, keys, _clipboard, windows = fake_desktop(MOUSEPAD)
    seen: list[list[str]] = []

    class Busy(FakeWindows):
        async def ping(self, window_id: int, timeout_s: float) -> bool | None:
            seen.append(list(keys.pressed))  # the keys it had been sent by then
            return await super().ping(window_id, timeout_s)

    busy = Busy(MOUSEPAD)
    desktop = Desktop(plain.keys, plain.clipboard, busy)

    await paste_big(desktop, MOUSEPAD)

    assert busy.pings == [MOUSEPAD.window_id]
    assert seen == [[]]  # asked before the paste keys went
    assert keys.pasted == ["big "]
    assert windows.pings == []


class SlowReader:
    """Asks for the formats at once (TARGETS), reads the text only after ``delay_s``."""

    def __init__(self, clipboard: FakeClipboard, delay_s: float) -> None:
        self.clipboard, self.delay_s = clipboard, delay_s
        self.reads: list[str | None] = []
        self.task: asyncio.Task[None] | None = None

    def __call__(self) -> None:
        offer = self.clipboard.current_offer("clipboard")
        assert offer is not None
        offer.note_request()  # TARGETS, no data
        self.task = asyncio.get_running_loop().create_task(self.read_later())

    async def read_later(self) -> None:
        await asyncio.sleep(self.delay_s)
        offer = self.clipboard.current_offer("clipboard")
        assert offer is not None
        offer.note_request()
        if offer.allows_read():
            self.reads.append(offer.snapshot.text())
            offer.note_fetch()


async def test_a_paste_the_target_began_is_waited_for_past_the_timeout() -> None:
    desktop, keys, clipboard, _ = fake_desktop(MOUSEPAD)
    app = SlowReader(clipboard, delay_s=0.3)
    keys.on_paste = app

    pasted = await paste_big(desktop, MOUSEPAD, restore_timeout_s=0.2)

    assert app.task is not None
    await app.task
    assert app.reads == ["big "]  # the completion, not the user's clipboard
    assert pasted.fetches == 1
    assert clipboard.data["clipboard"].text() == "user clipboard"


async def test_a_target_that_asks_nothing_still_fails_at_the_timeout() -> None:
    desktop, keys, clipboard, _ = fake_desktop(MOUSEPAD)
    keys.on_paste = lambda: None  # the keys were lost: no request at all

    with pytest.raises(InsertError, match="did not fetch"):
        await paste_big(desktop, MOUSEPAD, restore_timeout_s=0.1)
    assert clipboard.data["clipboard"].text() == "user clipboard"

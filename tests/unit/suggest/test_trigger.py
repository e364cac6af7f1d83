"""The suggestion trigger on a manual clock (no sleeps): a typing burst asks nothing, a pause
asks once, a keystroke cancels the request in flight, type-through shows the rest without a
request, and the text-after-the-caret rule."""

from __future__ import annotations

import random

import pytest

from anyfill.daemon.desktop.suggest.pause import AdaptivePause
from anyfill.daemon.desktop.suggest.rules import Field, refusal, text_follows
from anyfill.daemon.desktop.suggest.trigger import SuggestTrigger
from anyfill.daemon.scheduler.clock import ManualClock

TEXT = (
    "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat "
    "near the open window of the"
)[:100]


class Driver:
    """What the daemon's driver does with the trigger: counts asks and cancels."""

    def __init__(self, clock: ManualClock, pause: AdaptivePause, *, local: bool = True) -> None:
        self.asks: list[float] = []
        self.cancels: list[float] = []
        self.trigger = SuggestTrigger(
            clock,
            pause,
            ask=lambda: self.asks.append(clock.now()),
            cancel=lambda: self.cancels.append(clock.now()),
            local=lambda: local,
        )


async def type_text(
    clock: ManualClock, driver: Driver, text: str, rate: float, seed: int = 7, offset: int = 0
) -> None:
    """Type ``text`` at ``rate`` characters per second, each gap jittered by ±40 %: the
    editor reports an insert and the caret that follows it, as GTK does."""
    rng = random.Random(seed)
    for n, char in enumerate(text):
        driver.trigger.inserted(offset + n, char)
        driver.trigger.caret_moved(offset + n + 1)
        await clock.advance(rng.uniform(0.6, 1.4) / rate)


async def test_a_burst_at_5_chars_per_second_asks_nothing_until_the_pause() -> None:
    clock = ManualClock()
    driver = Driver(clock, AdaptivePause())
    await type_text(clock, driver, TEXT, rate=5)
    assert driver.asks == []  # not one request while the user types on
    await clock.advance(1.0)  # the user pauses
    assert len(driver.asks) == 1


async def test_requests_per_100_characters_with_pauses_between_phrases() -> None:
    """Typing with a 1.2 s think every 20 characters asks once per think, not per key."""
    clock = ManualClock()
    driver = Driver(clock, AdaptivePause())
    for part in range(5):
        await type_text(clock, driver, TEXT[part * 20 : part * 20 + 20], 5, seed=part)
        await clock.advance(1.2)
        driver.trigger.finished(latency_ms=120)
    assert len(driver.asks) == 5


async def test_a_fixed_short_pause_would_ask_in_the_middle_of_slow_typing() -> None:
    """The adaptive pause is what keeps slow typing quiet: 100 ms fixed asks many times."""
    clock = ManualClock()
    fixed = Driver(clock, AdaptivePause(fixed_ms=100))
    await type_text(clock, fixed, TEXT, rate=5)
    assert len(fixed.asks) > 50


async def test_a_keystroke_cancels_the_request_in_flight_at_once() -> None:
    clock = ManualClock()
    driver = Driver(clock, AdaptivePause(fixed_ms=200))
    driver.trigger.inserted(0, "a")
    await clock.advance(0.25)
    assert len(driver.asks) == 1
    assert driver.trigger.busy
    pressed = clock.now()
    driver.trigger.inserted(1, "b")
    assert driver.cancels == [pressed]  # same instant: no timer in between
    assert not driver.trigger.busy
    await clock.advance(0.25)
    assert len(driver.asks) == 2  # and the next pause asks again
    driver.trigger.finished(latency_ms=80)
    driver.trigger.caret_moved(2)  # the caret echo of the edit: nothing
    assert driver.trigger.armed is False


async def test_a_caret_moved_elsewhere_cancels_and_asks_again_after_the_pause() -> None:
    clock = ManualClock()
    driver = Driver(clock, AdaptivePause(fixed_ms=200))
    driver.trigger.inserted(5, "x")
    await clock.advance(0.3)
    driver.trigger.caret_moved(0)  # the user clicked at the start
    assert len(driver.cancels) == 1
    await clock.advance(0.3)
    assert len(driver.asks) == 2


async def items_suggested() -> tuple[ManualClock, Driver]:
    """The user typed "(" at 9 and paused; "items):" shows at 10 (one request asked)."""
    clock = ManualClock()
    driver = Driver(clock, AdaptivePause(fixed_ms=200))
    driver.trigger.inserted(9, "(")
    await clock.advance(0.3)
    driver.trigger.finished(latency_ms=50)
    driver.trigger.shown(10, "items):")
    return clock, driver


async def test_type_through_shows_the_rest_without_a_request() -> None:
    clock, driver = await items_suggested()
    rest = driver.trigger.inserted(10, "i")
    assert rest is not None
    assert (rest.offset, rest.middle) == (11, "tems):")
    rest = driver.trigger.inserted(11, "te")  # two at once (a fast typist, one event)
    assert rest is not None
    assert rest.middle == "ms):"
    await clock.advance(2.0)
    assert len(driver.asks) == 1  # nothing asked while typing through
    assert driver.trigger.inserted(13, "x") is None  # a different character: asked anew
    await clock.advance(0.3)
    assert len(driver.asks) == 2


async def test_the_accepted_suggestion_going_in_whole_asks_nothing_new() -> None:
    """Tab pastes the suggestion; the app's event for it comes after our keys under load
    (test_suggestions.py's Mousepad case, 1 of 2 full runs under two busy loops: a new
    ghost appeared)."""
    clock, driver = await items_suggested()

    assert driver.trigger.inserted(10, "items):") is None
    driver.trigger.caret_moved(17)  # the caret after the paste
    await clock.advance(2.0)

    assert len(driver.asks) == 1  # nothing asked after the insertion
    assert driver.cancels == []
    driver.trigger.inserted(17, " ")  # the user types on: asked again after the pause
    await clock.advance(0.3)
    assert len(driver.asks) == 2


async def test_the_same_text_elsewhere_is_typing_and_asks_again() -> None:
    clock, driver = await items_suggested()

    driver.trigger.inserted(30, "items):")  # not at the suggestion's offset
    await clock.advance(0.3)

    assert len(driver.asks) == 2


async def test_a_local_backend_waits_less_than_a_cloud_one_and_latency_lengthens_it() -> None:
    local, cloud = AdaptivePause(), AdaptivePause()
    assert local.ms(local=True) < cloud.ms(local=False)
    slow = AdaptivePause()
    for ms in (800, 900, 1000):
        slow.latency(ms)
    assert slow.ms(local=True) > local.ms(local=True)
    fast_typist = AdaptivePause()
    for n in range(10):
        fast_typist.keystroke(100 + n * 0.06)
    assert fast_typist.ms(local=True) == pytest.approx(150.0)  # the floor: 2 x 60 ms < 150
    assert AdaptivePause().ms(local=True) >= 100
    for ms in (20000,) * 5:
        slow.latency(ms)
    assert slow.ms(local=False) == 1000  # clamped


@pytest.mark.parametrize(
    ("after", "asks"),
    [
        ("", True),
        ("\nnext line", True),
        (")", True),  # a closing bracket: still writing on
        ("  ;", True),
        ("12345678", True),  # exactly the limit
        ("123456789", False),
        (" and the rest of the sentence\nmore", False),
    ],
)
def test_text_after_the_caret_on_its_line(after: str, asks: bool) -> None:
    assert (refusal(Field("x = f(", after), 8) == "") is asks


def test_selections_non_editable_and_password_fields_are_never_asked() -> None:
    assert refusal(Field("a", "", selection=True), 8) == "text is selected"
    assert refusal(Field("a", "", editable=False), 8) == "not an editable text field"
    assert refusal(Field("a", "", password=True), 8) == "a password field"
    assert text_follows(" tail\n")
    assert not text_follows("   \nnext")

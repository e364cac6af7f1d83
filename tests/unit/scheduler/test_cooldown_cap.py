"""A server's word cannot lock a backend out: pauses are capped, then a request probes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from anyfill.daemon.errors import RateLimited, ServerError
from anyfill.daemon.scheduler.cooldown import MAX_SERVER_COOLDOWN_S, Health


def test_retry_after_of_a_week_is_capped_and_probed_after() -> None:
    health = Health()
    assert health.fail(0.0, RateLimited("a", "slow down"), 999_999.0) == MAX_SERVER_COOLDOWN_S
    assert health.blocked(MAX_SERVER_COOLDOWN_S - 1)
    assert not health.blocked(MAX_SERVER_COOLDOWN_S)  # the next press asks the server again
    # The probe is refused again: another capped pause, not a week.
    health.fail(MAX_SERVER_COOLDOWN_S, RateLimited("a", "still"), 999_999.0)
    assert not health.blocked(2 * MAX_SERVER_COOLDOWN_S)


def test_a_quota_reset_far_away_is_capped_too() -> None:
    health = Health()
    health.hold_until(10.0 + 86_400, "quota used up", 10.0)
    assert health.blocked(10.0 + MAX_SERVER_COOLDOWN_S - 1)
    assert not health.blocked(10.0 + MAX_SERVER_COOLDOWN_S)


@given(
    delays=st.lists(
        st.one_of(st.none(), st.floats(min_value=-10, max_value=1e12, allow_nan=False)),
        min_size=1,
        max_size=20,
    ),
    start=st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_no_sequence_of_answers_pauses_longer_than_the_cap(
    delays: list[float | None], start: float
) -> None:
    health = Health()
    now = start
    for delay in delays:
        error = RateLimited("a", "429") if delay is not None else ServerError("a", "500")
        health.fail(now, error, delay)
        assert health.cooling_until <= now + MAX_SERVER_COOLDOWN_S
        now += 1.0

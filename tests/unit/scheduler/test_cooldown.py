from __future__ import annotations

from anyfill.daemon.errors import BackendUnavailable, RateLimited, ServerError
from anyfill.daemon.scheduler.cooldown import Health


def test_server_delay_is_used_exactly() -> None:
    health = Health()
    assert health.fail(100.0, RateLimited("a", "slow down"), 7.0) == 7.0
    assert health.cooling(106.9)
    assert not health.cooling(107.0)
    assert health.kind == "rate_limited"


def test_default_delay_doubles_with_consecutive_failures_and_resets_on_success() -> None:
    health = Health()
    delays = [health.fail(0.0, ServerError("a", "boom"), None) for _ in range(6)]
    assert delays == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    health.succeed()
    assert health.fail(0.0, BackendUnavailable("a", "refused"), None) == 1.0


def test_a_shorter_cooldown_never_shortens_a_longer_one() -> None:
    health = Health()
    health.fail(0.0, RateLimited("a", "quota"), 60.0)
    health.fail(1.0, ServerError("a", "boom"), 2.0)
    assert health.cooling_until == 60.0
    assert health.kind == "rate_limited"


def test_soft_cooldown_ends_on_success_but_a_hard_one_lasts() -> None:
    health = Health()
    health.fail(0.0, ServerError("a", "500"), None)
    assert health.cooling(1.0)
    assert not health.blocked(1.0)
    health.succeed()
    assert not health.cooling(1.0)
    health.fail(0.0, ServerError("a", "503"), 10.0)  # the server said how long
    assert health.blocked(1.0)
    health.succeed()
    assert health.blocked(9.9)
    assert not health.blocked(10.0)

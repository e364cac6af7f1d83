"""Per-backend figures: queue wait, time to first token, total time, outcomes, tokens, cost.

Fed by :class:`AttemptFinished` events; summaries are computed on demand (and published at
most once per ``publish_every_s``), so the request path pays only for appending numbers.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from anyfill.config.model import Price
from anyfill.daemon.bus import EventBus
from anyfill.daemon.scheduler.clock import Clock
from anyfill.daemon.scheduler.events import AttemptFinished, BackendMetrics

SAMPLES = 256


def percentile(values: deque[float] | list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def cost_of(price: Price | None, prompt_tokens: int, completion_tokens: int) -> float:
    if price is None:
        return 0.0
    return (
        prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok
    ) / 1_000_000


class LocalDay:
    """``date.today()``, asked of the system once a day: each call converts the time to
    local time, and every finished request that reports usage asks for the day."""

    def __init__(self) -> None:
        self._day: dt.date | None = None
        self._until = 0.0

    def __call__(self) -> dt.date:
        now = time.time()
        if self._day is None or now >= self._until:
            day = self._day = dt.date.today()
            self._until = dt.datetime.combine(day + dt.timedelta(days=1), dt.time()).timestamp()
            return day
        return self._day


@dataclass
class _Stats:
    queue_wait_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    first_token_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    total_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    outcomes: Counter[str] = field(default_factory=Counter)
    day: dt.date = field(default_factory=dt.date.today)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


@dataclass(frozen=True)
class LaneState:
    """What the scheduler knows live about a backend (not kept in the samples)."""

    in_flight: int = 0
    queued: int = 0
    cooling_seconds_left: float = 0.0
    cooling_reason: str = ""


class Metrics:
    def __init__(
        self,
        clock: Clock,
        bus: EventBus | None = None,
        prices: Mapping[str, Price] | None = None,
        *,
        lane_state: Callable[[str], LaneState] | None = None,
        publish_every_s: float = 1.0,
        today: Callable[[], dt.date] | None = None,
    ) -> None:
        self.clock = clock
        self.bus = bus
        self.prices = dict(prices or {})
        self._lane_state = lane_state
        self._stats: dict[str, _Stats] = {}
        self._today = today or LocalDay()
        self.publish_every_s = publish_every_s
        self._last_publish: dict[str, float] = {}

    def cost(self, backend: str, prompt_tokens: int, completion_tokens: int) -> float:
        return cost_of(self.prices.get(backend), prompt_tokens, completion_tokens)

    def record(self, event: AttemptFinished) -> None:
        stats = self._stats.get(event.backend)
        if stats is None:
            stats = self._stats[event.backend] = _Stats(day=self._today())
        stats.outcomes[event.outcome] += 1
        if event.queue_wait_ms is not None:
            stats.queue_wait_ms.append(event.queue_wait_ms)
        if event.first_token_ms is not None:
            stats.first_token_ms.append(event.first_token_ms)
        if event.total_ms is not None and event.outcome == "ok":
            stats.total_ms.append(event.total_ms)
        if event.prompt_tokens or event.completion_tokens:
            today = self._today()
            if stats.day != today:  # a new day: the "today" counters start over
                stats.day, stats.prompt_tokens, stats.completion_tokens, stats.cost = today, 0, 0, 0
            stats.prompt_tokens += event.prompt_tokens
            stats.completion_tokens += event.completion_tokens
            stats.cost += event.cost
        bus = self.bus
        if bus is not None:
            bus.publish(event)
            now = self.clock.now()
            if now - self._last_publish.get(event.backend, -1e18) >= self.publish_every_s:
                self._last_publish[event.backend] = now
                bus.publish(self.summary(event.backend))

    def summary(self, backend: str) -> BackendMetrics:
        stats = self._stats.get(backend) or _Stats(day=self._today())
        state = self._lane_state(backend) if self._lane_state else LaneState()
        same_day = stats.day == self._today()
        return BackendMetrics(
            backend=backend,
            requests=sum(stats.outcomes.values()),
            outcomes=tuple(sorted(stats.outcomes.items())),
            queue_wait_ms_p50=percentile(stats.queue_wait_ms, 0.5),
            first_token_ms_p50=percentile(stats.first_token_ms, 0.5),
            first_token_ms_p95=percentile(stats.first_token_ms, 0.95),
            total_ms_p50=percentile(stats.total_ms, 0.5),
            in_flight=state.in_flight,
            queued=state.queued,
            cooling_seconds_left=state.cooling_seconds_left,
            cooling_reason=state.cooling_reason,
            prompt_tokens_today=stats.prompt_tokens if same_day else 0,
            completion_tokens_today=stats.completion_tokens if same_day else 0,
            cost_today=stats.cost if same_day else 0.0,
        )

    def summaries(self) -> dict[str, BackendMetrics]:
        return {name: self.summary(name) for name in self._stats}

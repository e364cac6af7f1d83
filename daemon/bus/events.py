"""Events of the request path and of the broker link (frozen, with an MQTT-style topic).

``RequestStarted`` / ``RequestEnded`` come from the engine for every completion (hotkey,
CLI or MQTT). They carry the captured text only in ``prefix``/``suffix``/``middle``, which
the MQTT adapter publishes only when the user turned on ``privacy.mqtt_text``; an error's
message may hold a server's words, so MQTT tells ``RequestEnded.failure`` under that switch.
``BrokerStatus`` comes from the MQTT adapter: the tray and ``doctor`` say "broker
unreachable" from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from anyfill.daemon.errors import Told


@dataclass(frozen=True)
class RequestStarted:
    request_id: str
    priority: str
    method: str
    """How the text was captured: keyboard, accessibility, clipboard, cli, mqtt..."""
    prefix: str = ""
    suffix: str = ""

    @property
    def topic(self) -> str:
        return "events/request/started"


@dataclass(frozen=True)
class RequestEnded:
    request_id: str
    ok: bool
    backend: str = ""
    ms: float = 0.0
    first_token_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str = ""
    """The failure's class and message, as the log may say it (``privacy.log_text``)."""
    middle: str = ""
    failure: Told | None = field(default=None, compare=False, repr=False)
    """The failure as ``Class: message`` in both forms, for MQTT to tell under
    ``privacy.mqtt_text`` instead."""

    @property
    def topic(self) -> str:
        return "events/request/finished" if self.ok else "events/request/failed"


@dataclass(frozen=True)
class BrokerStatus:
    """The link to the MQTT broker changed: ``connected`` or not, and why."""

    url: str
    connected: bool
    reason: str = ""

    @property
    def topic(self) -> str:
        return "state/broker"


__all__ = ["BrokerStatus", "RequestEnded", "RequestStarted"]

"""anyfill.daemon.bus: events from the core to the tray, the CLI and MQTT."""

from anyfill.daemon.bus.events import BrokerStatus, RequestEnded, RequestStarted
from anyfill.daemon.bus.inprocess import Event, EventBus, Subscription

__all__ = ["BrokerStatus", "Event", "EventBus", "RequestEnded", "RequestStarted", "Subscription"]

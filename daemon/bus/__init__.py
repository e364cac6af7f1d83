"""anyfill.daemon.bus: events from the core to the tray, the CLI and (later) MQTT."""

from anyfill.daemon.bus.inprocess import Event, EventBus, Subscription

__all__ = ["Event", "EventBus", "Subscription"]

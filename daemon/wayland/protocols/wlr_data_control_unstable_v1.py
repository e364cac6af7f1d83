"""wlr-data-control-unstable-v1 (version 2): a privileged client reads and sets the
clipboard and the primary selection of a seat without a focused surface.

Transcribed from the protocol's specification (wlr-protocols) into pywayland's protocol
classes, the way pywayland's scanner lays out the modules it ships: the interfaces first,
then each side's messages in opcode order, then the C interface tables. Only the client
side is defined (requests on the proxies, events as dispatcher names).
"""

from __future__ import annotations

import enum

from pywayland.protocol.wayland import WlSeat, WlSeatProxy

# Imported from their own modules: pywayland's package __init__ does not re-export them
# for mypy.
from pywayland.protocol_core.argument import Argument
from pywayland.protocol_core.interface import Interface
from pywayland.protocol_core.proxy import Proxy
from pywayland.protocol_core.resource import Resource
from pywayland.scanner.argument import ArgumentType


class ZwlrDataControlManagerV1(Interface):
    """Creates data sources and per-seat data devices."""

    name = "zwlr_data_control_manager_v1"
    version = 2


class ZwlrDataControlDeviceV1(Interface):
    """A seat's selections: announces their offers and sets new ones."""

    name = "zwlr_data_control_device_v1"
    version = 2

    class error(enum.IntEnum):
        used_source = 1


class ZwlrDataControlSourceV1(Interface):
    """Data we offer: its MIME types, served on ``send``."""

    name = "zwlr_data_control_source_v1"
    version = 1

    class error(enum.IntEnum):
        invalid_offer = 1


class ZwlrDataControlOfferV1(Interface):
    """Data another client offers: its MIME types, read with ``receive``."""

    name = "zwlr_data_control_offer_v1"
    version = 1


class ZwlrDataControlManagerV1Proxy(Proxy[ZwlrDataControlManagerV1]):
    interface = ZwlrDataControlManagerV1

    @ZwlrDataControlManagerV1.request(
        Argument(ArgumentType.NewId, interface=ZwlrDataControlSourceV1),
    )
    def create_data_source(self) -> ZwlrDataControlSourceV1Proxy:
        proxy: ZwlrDataControlSourceV1Proxy = self._marshal_constructor(0, ZwlrDataControlSourceV1)
        return proxy

    @ZwlrDataControlManagerV1.request(
        Argument(ArgumentType.NewId, interface=ZwlrDataControlDeviceV1),
        Argument(ArgumentType.Object, interface=WlSeat),
    )
    def get_data_device(self, seat: WlSeatProxy) -> ZwlrDataControlDeviceV1Proxy:
        proxy: ZwlrDataControlDeviceV1Proxy = self._marshal_constructor(
            1, ZwlrDataControlDeviceV1, seat
        )
        return proxy

    @ZwlrDataControlManagerV1.request()
    def destroy(self) -> None:
        self._marshal(2)
        self._destroy()


class ZwlrDataControlDeviceV1Proxy(Proxy[ZwlrDataControlDeviceV1]):
    interface = ZwlrDataControlDeviceV1

    @ZwlrDataControlDeviceV1.request(
        Argument(ArgumentType.Object, interface=ZwlrDataControlSourceV1, nullable=True),
    )
    def set_selection(self, source: ZwlrDataControlSourceV1Proxy | None) -> None:
        self._marshal(0, source)

    @ZwlrDataControlDeviceV1.request()
    def destroy(self) -> None:
        self._marshal(1)
        self._destroy()

    @ZwlrDataControlDeviceV1.request(
        Argument(ArgumentType.Object, interface=ZwlrDataControlSourceV1, nullable=True),
        version=2,
    )
    def set_primary_selection(self, source: ZwlrDataControlSourceV1Proxy | None) -> None:
        self._marshal(2, source)


class ZwlrDataControlSourceV1Proxy(Proxy[ZwlrDataControlSourceV1]):
    interface = ZwlrDataControlSourceV1

    @ZwlrDataControlSourceV1.request(Argument(ArgumentType.String))
    def offer(self, mime_type: str) -> None:
        self._marshal(0, mime_type)

    @ZwlrDataControlSourceV1.request()
    def destroy(self) -> None:
        self._marshal(1)
        self._destroy()


class ZwlrDataControlOfferV1Proxy(Proxy[ZwlrDataControlOfferV1]):
    interface = ZwlrDataControlOfferV1

    @ZwlrDataControlOfferV1.request(
        Argument(ArgumentType.String),
        Argument(ArgumentType.FileDescriptor),
    )
    def receive(self, mime_type: str, fd: int) -> None:
        self._marshal(0, mime_type, fd)

    @ZwlrDataControlOfferV1.request()
    def destroy(self) -> None:
        self._marshal(1)
        self._destroy()


# The events, in opcode order, on the compositor-side classes as pywayland lays them out;
# a client receives them through ``proxy.dispatcher[name]``.
class ZwlrDataControlDeviceV1Resource(Resource[ZwlrDataControlDeviceV1]):
    interface = ZwlrDataControlDeviceV1

    @ZwlrDataControlDeviceV1.event(
        Argument(ArgumentType.NewId, interface=ZwlrDataControlOfferV1),
    )
    def data_offer(self, id: ZwlrDataControlOfferV1) -> None:
        self._post_event(0, id)

    @ZwlrDataControlDeviceV1.event(
        Argument(ArgumentType.Object, interface=ZwlrDataControlOfferV1, nullable=True),
    )
    def selection(self, id: ZwlrDataControlOfferV1 | None) -> None:
        self._post_event(1, id)

    @ZwlrDataControlDeviceV1.event()
    def finished(self) -> None:
        self._post_event(2)

    @ZwlrDataControlDeviceV1.event(
        Argument(ArgumentType.Object, interface=ZwlrDataControlOfferV1, nullable=True),
        version=2,
    )
    def primary_selection(self, id: ZwlrDataControlOfferV1 | None) -> None:
        self._post_event(3, id)


class ZwlrDataControlSourceV1Resource(Resource[ZwlrDataControlSourceV1]):
    interface = ZwlrDataControlSourceV1

    @ZwlrDataControlSourceV1.event(
        Argument(ArgumentType.String),
        Argument(ArgumentType.FileDescriptor),
    )
    def send(self, mime_type: str, fd: int) -> None:
        self._post_event(0, mime_type, fd)

    @ZwlrDataControlSourceV1.event()
    def cancelled(self) -> None:
        self._post_event(1)


class ZwlrDataControlOfferV1Resource(Resource[ZwlrDataControlOfferV1]):
    interface = ZwlrDataControlOfferV1

    @ZwlrDataControlOfferV1.event(Argument(ArgumentType.String))
    def offer(self, mime_type: str) -> None:
        self._post_event(0, mime_type)


ZwlrDataControlManagerV1._gen_c()
ZwlrDataControlManagerV1.proxy_class = ZwlrDataControlManagerV1Proxy

ZwlrDataControlDeviceV1._gen_c()
ZwlrDataControlDeviceV1.proxy_class = ZwlrDataControlDeviceV1Proxy
ZwlrDataControlDeviceV1.resource_class = ZwlrDataControlDeviceV1Resource

ZwlrDataControlSourceV1._gen_c()
ZwlrDataControlSourceV1.proxy_class = ZwlrDataControlSourceV1Proxy
ZwlrDataControlSourceV1.resource_class = ZwlrDataControlSourceV1Resource

ZwlrDataControlOfferV1._gen_c()
ZwlrDataControlOfferV1.proxy_class = ZwlrDataControlOfferV1Proxy
ZwlrDataControlOfferV1.resource_class = ZwlrDataControlOfferV1Resource

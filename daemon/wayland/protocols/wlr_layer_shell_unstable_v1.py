"""wlr-layer-shell-unstable-v1 (version 4), for pywayland.

Transcribed from the protocol's published XML: interface names, versions, the order of
requests and events (their opcodes) and argument types. sway, Hyprland, KDE and other
wlroots compositors offer it; GNOME does not.
"""

# pywayland's protocol classes are untyped decorators: this module is checked loosely.
# mypy: disable-error-code="misc,untyped-decorator,no-untyped-call"

from __future__ import annotations

import enum

from pywayland.protocol.wayland import WlOutput, WlSurface
from pywayland.protocol.xdg_shell import XdgPopup
from pywayland.protocol_core.argument import Argument
from pywayland.protocol_core.globals import Global
from pywayland.protocol_core.interface import Interface
from pywayland.protocol_core.proxy import Proxy
from pywayland.protocol_core.resource import Resource
from pywayland.scanner.argument import ArgumentType


class ZwlrLayerShellV1(Interface):
    """Creates layer surfaces: surfaces stacked as layers of the desktop."""

    name = "zwlr_layer_shell_v1"
    version = 4

    class error(enum.IntEnum):
        role = 0
        invalid_layer = 1
        already_constructed = 2

    class layer(enum.IntEnum):
        background = 0
        bottom = 1
        top = 2
        overlay = 3


class ZwlrLayerSurfaceV1(Interface):
    """One layer surface: its size, anchor, margins and keyboard interactivity."""

    name = "zwlr_layer_surface_v1"
    version = 4

    class keyboard_interactivity(enum.IntEnum):
        none = 0
        exclusive = 1
        on_demand = 2

    class error(enum.IntEnum):
        invalid_surface_state = 0
        invalid_size = 1
        invalid_anchor = 2
        invalid_keyboard_interactivity = 3

    class anchor(enum.IntFlag):
        top = 1
        bottom = 2
        left = 4
        right = 8


class ZwlrLayerShellV1Proxy(Proxy[ZwlrLayerShellV1]):
    interface = ZwlrLayerShellV1

    @ZwlrLayerShellV1.request(
        Argument(ArgumentType.NewId, interface=ZwlrLayerSurfaceV1),
        Argument(ArgumentType.Object, interface=WlSurface),
        Argument(ArgumentType.Object, interface=WlOutput, nullable=True),
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.String),
    )
    def get_layer_surface(
        self, surface: object, output: object | None, layer: int, namespace: str
    ) -> ZwlrLayerSurfaceV1Proxy:
        proxy: ZwlrLayerSurfaceV1Proxy = self._marshal_constructor(
            0, ZwlrLayerSurfaceV1, surface, output, layer, namespace
        )
        return proxy

    @ZwlrLayerShellV1.request(version=3)
    def destroy(self) -> None:
        self._marshal(1)
        self._destroy()


class ZwlrLayerShellV1Resource(Resource[ZwlrLayerShellV1]):
    interface = ZwlrLayerShellV1


class ZwlrLayerShellV1Global(Global[ZwlrLayerShellV1]):
    interface = ZwlrLayerShellV1


class ZwlrLayerSurfaceV1Proxy(Proxy[ZwlrLayerSurfaceV1]):
    interface = ZwlrLayerSurfaceV1

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Uint), Argument(ArgumentType.Uint))
    def set_size(self, width: int, height: int) -> None:
        self._marshal(0, width, height)

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Uint))
    def set_anchor(self, anchor: int) -> None:
        self._marshal(1, anchor)

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Int))
    def set_exclusive_zone(self, zone: int) -> None:
        self._marshal(2, zone)

    @ZwlrLayerSurfaceV1.request(
        Argument(ArgumentType.Int),
        Argument(ArgumentType.Int),
        Argument(ArgumentType.Int),
        Argument(ArgumentType.Int),
    )
    def set_margin(self, top: int, right: int, bottom: int, left: int) -> None:
        self._marshal(3, top, right, bottom, left)

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Uint))
    def set_keyboard_interactivity(self, keyboard_interactivity: int) -> None:
        self._marshal(4, keyboard_interactivity)

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Object, interface=XdgPopup))
    def get_popup(self, popup: object) -> None:
        self._marshal(5, popup)

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Uint))
    def ack_configure(self, serial: int) -> None:
        self._marshal(6, serial)

    @ZwlrLayerSurfaceV1.request()
    def destroy(self) -> None:
        self._marshal(7)
        self._destroy()

    @ZwlrLayerSurfaceV1.request(Argument(ArgumentType.Uint), version=2)
    def set_layer(self, layer: int) -> None:
        self._marshal(8, layer)


class ZwlrLayerSurfaceV1Resource(Resource[ZwlrLayerSurfaceV1]):
    interface = ZwlrLayerSurfaceV1

    @ZwlrLayerSurfaceV1.event(
        Argument(ArgumentType.Uint), Argument(ArgumentType.Uint), Argument(ArgumentType.Uint)
    )
    def configure(self, serial: int, width: int, height: int) -> None:
        self._post_event(0, serial, width, height)

    @ZwlrLayerSurfaceV1.event()
    def closed(self) -> None:
        self._post_event(1)


class ZwlrLayerSurfaceV1Global(Global[ZwlrLayerSurfaceV1]):
    interface = ZwlrLayerSurfaceV1


ZwlrLayerShellV1._gen_c()
ZwlrLayerShellV1.proxy_class = ZwlrLayerShellV1Proxy
ZwlrLayerShellV1.resource_class = ZwlrLayerShellV1Resource
ZwlrLayerShellV1.global_class = ZwlrLayerShellV1Global

ZwlrLayerSurfaceV1._gen_c()
ZwlrLayerSurfaceV1.proxy_class = ZwlrLayerSurfaceV1Proxy
ZwlrLayerSurfaceV1.resource_class = ZwlrLayerSurfaceV1Resource
ZwlrLayerSurfaceV1.global_class = ZwlrLayerSurfaceV1Global

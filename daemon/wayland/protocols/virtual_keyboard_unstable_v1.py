"""virtual-keyboard-unstable-v1 (version 1): a client creates a keyboard on a seat, gives
it an XKB keymap and sends key and modifier events through it, as from a real keyboard.

Transcribed from the protocol's specification (wayland-protocols' ``unstable/
virtual-keyboard``, first published by wlroots) into pywayland's protocol classes, laid out
as pywayland's scanner lays out the modules it ships: the interfaces, then each one's
requests in opcode order, then the C interface tables. The protocol has no events; only the
client side is defined.
"""

from __future__ import annotations

import enum

from pywayland.protocol.wayland import WlSeat, WlSeatProxy

# Imported from their own modules: pywayland's package __init__ does not re-export them
# for mypy.
from pywayland.protocol_core.argument import Argument
from pywayland.protocol_core.interface import Interface
from pywayland.protocol_core.proxy import Proxy
from pywayland.scanner.argument import ArgumentType


class ZwpVirtualKeyboardV1(Interface):
    """One virtual keyboard: keymap first, then keys and modifier state."""

    name = "zwp_virtual_keyboard_v1"
    version = 1

    class error(enum.IntEnum):
        no_keymap = 0


class ZwpVirtualKeyboardManagerV1(Interface):
    """Creates virtual keyboards; a compositor may refuse an untrusted client."""

    name = "zwp_virtual_keyboard_manager_v1"
    version = 1

    class error(enum.IntEnum):
        unauthorized = 0


class ZwpVirtualKeyboardV1Proxy(Proxy[ZwpVirtualKeyboardV1]):
    interface = ZwpVirtualKeyboardV1

    @ZwpVirtualKeyboardV1.request(
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.FileDescriptor),
        Argument(ArgumentType.Uint),
    )
    def keymap(self, format: int, fd: int, size: int) -> None:
        """``format`` is a ``wl_keyboard.keymap_format``; ``size`` counts the bytes of the
        keymap in ``fd``, its terminating NUL included."""
        self._marshal(0, format, fd, size)

    @ZwpVirtualKeyboardV1.request(
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.Uint),
    )
    def key(self, time: int, key: int, state: int) -> None:
        """``time`` in milliseconds, ``key`` an evdev code, ``state`` a
        ``wl_keyboard.key_state``."""
        self._marshal(1, time, key, state)

    @ZwpVirtualKeyboardV1.request(
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.Uint),
        Argument(ArgumentType.Uint),
    )
    def modifiers(
        self, mods_depressed: int, mods_latched: int, mods_locked: int, group: int
    ) -> None:
        """The modifier and group state, as masks of the uploaded keymap's modifiers."""
        self._marshal(2, mods_depressed, mods_latched, mods_locked, group)

    @ZwpVirtualKeyboardV1.request()
    def destroy(self) -> None:
        self._marshal(3)
        self._destroy()


class ZwpVirtualKeyboardManagerV1Proxy(Proxy[ZwpVirtualKeyboardManagerV1]):
    interface = ZwpVirtualKeyboardManagerV1

    @ZwpVirtualKeyboardManagerV1.request(
        Argument(ArgumentType.Object, interface=WlSeat),
        Argument(ArgumentType.NewId, interface=ZwpVirtualKeyboardV1),
    )
    def create_virtual_keyboard(self, seat: WlSeatProxy) -> ZwpVirtualKeyboardV1Proxy:
        proxy: ZwpVirtualKeyboardV1Proxy = self._marshal_constructor(0, ZwpVirtualKeyboardV1, seat)
        return proxy


ZwpVirtualKeyboardV1._gen_c()
ZwpVirtualKeyboardV1.proxy_class = ZwpVirtualKeyboardV1Proxy

ZwpVirtualKeyboardManagerV1._gen_c()
ZwpVirtualKeyboardManagerV1.proxy_class = ZwpVirtualKeyboardManagerV1Proxy

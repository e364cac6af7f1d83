"""The preview popup's keys and the user's activity on X11.

The popup never takes the keyboard focus, so its keys (Tab, Enter, Esc, Alt+]) are
grabbed on the root window with XGrabKey while it shows, exactly like the hotkeys, and
released the moment it closes. Typing and clicks elsewhere are seen as XInput 2 raw
events on the root window: the server reports them whoever has the focus, grabs or not.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from anyfill.daemon.context import CaretRect, ScreenArea
from anyfill.daemon.desktop.hotkeys import MODIFIERS, Hotkey
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.x11.connection import XConnection
from anyfill.daemon.x11.grab import X11Hotkeys
from anyfill.daemon.x11.keyboard import X11Keys

log = logging.getLogger("anyfill.x11.preview")

_MODIFIER_KEYSYMS = (
    "Shift_L",
    "Shift_R",
    "Control_L",
    "Control_R",
    "Alt_L",
    "Alt_R",
    "Meta_L",
    "Meta_R",
    "Super_L",
    "Super_R",
    "ISO_Level3_Shift",
    "Caps_Lock",
    "Num_Lock",
)
_GENERIC_EVENT = 35
_DETAIL_OFFSET = 6
"""In a raw XI2 event after the generic header: deviceid (2), time (4), then detail."""


class X11PreviewInput:
    """The :class:`~anyfill.daemon.desktop.ports.PreviewInput` port on X11."""

    def __init__(self, conn: XConnection, keys: X11Keys) -> None:
        self._conn = conn
        self._keys = keys
        self._grab: X11Hotkeys[str] | None = None
        self._xinput: int | None = None
        self._xinput_checked = False

    async def grab_keys(
        self, bindings: Mapping[str, Hotkey], on_key: Callable[[str], None]
    ) -> frozenset[int]:
        await self.release_keys()
        grab = X11Hotkeys[str](self._conn, self._keys, bindings, on_key, announce=False)
        await grab.__aenter__()
        self._grab = grab
        return grab.keycodes | self._modifier_keycodes()

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        return caret, None  # X11 character extents are in screen coordinates already

    @property
    def refused_keys(self) -> dict[str, str]:
        return {}  # a key another program holds fails the grab (X11Hotkeys says so)

    async def release_keys(self) -> None:
        from Xlib import X

        grab, self._grab = self._grab, None
        if grab is not None:
            await grab.__aexit__(None, None, None)
            if self._conn.display is not None and not self._conn.lost.is_set():
                # A grabbed key still held down keeps the whole keyboard grabbed (X turns a
                # passive grab active until the release): end it, or a key handed back to the
                # application (replayed with XTEST) would come to us again and be lost.
                self._conn.display.ungrab_keyboard(X.CurrentTime)
                self._conn.flush()

    def _modifier_keycodes(self) -> frozenset[int]:
        from Xlib import XK

        display = self._conn.display
        codes = {int(display.keysym_to_keycode(XK.string_to_keysym(n))) for n in _MODIFIER_KEYSYMS}
        for name in MODIFIERS:
            codes.add(self._keys.keycode(name))
        codes.discard(0)
        return frozenset(codes)

    def _xinput_opcode(self) -> int | None:
        if not self._xinput_checked:
            self._xinput_checked = True
            display = self._conn.display
            info = display.query_extension("XInputExtension")
            if info is not None and info.present:
                version = display.xinput_query_version()
                if (version.major_version, version.minor_version) >= (2, 0):
                    self._xinput = int(info.major_opcode)
            if self._xinput is None:
                log.warning("no XInput 2: the preview closes on a focus change only")
        return self._xinput

    def watch_activity(self, on_activity: Callable[[str, int], None]) -> Callable[[], None]:
        opcode = self._xinput_opcode()
        if opcode is None:
            return lambda: None
        from Xlib.ext import xinput

        root = self._conn.root
        mask = xinput.RawKeyPressMask | xinput.RawButtonPressMask

        def on_generic(event: Any) -> None:
            if getattr(event, "extension", None) != opcode:
                return
            data = event.data
            detail = 0
            if isinstance(data, bytes | bytearray) and len(data) >= _DETAIL_OFFSET + 4:
                detail = int.from_bytes(data[_DETAIL_OFFSET : _DETAIL_OFFSET + 4], sys.byteorder)
            if event.evtype == xinput.RawKeyPress:
                on_activity("key", detail)
            elif event.evtype == xinput.RawButtonPress:
                on_activity("click", detail)

        unsubscribe = self._conn.on(_GENERIC_EVENT, on_generic)
        root.xinput_select_events([(xinput.AllMasterDevices, mask)])
        self._conn.flush()

        def stop() -> None:
            unsubscribe()
            if self._conn.display is not None and not self._conn.lost.is_set():
                root.xinput_select_events([(xinput.AllMasterDevices, 0)])
                self._conn.flush()

        return stop

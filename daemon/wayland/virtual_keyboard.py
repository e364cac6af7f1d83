"""The :class:`~anyfill.daemon.desktop.ports.Keys` port through our own virtual keyboard
(zwp_virtual_keyboard_v1, offered by wlroots compositors: sway, Hyprland, river, Wayfire).

One connection and one keyboard for the daemon's life; its keymap (the standard US layout,
see :mod:`anyfill.daemon.wayland.keymap`) is uploaded once and again only when typed text
needs a character it has no key for. Chords go out as a real keyboard sends them: the
modifier's key, then the modifier state (the compositor does not derive it from virtual
keys), the key, and the same backwards.

libwayland calls block, so they run on one worker thread of their own, one batch at a
time, each batch ending with a round trip: when a call returns, the compositor has handled
every key (and a connection it closed is seen at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from anyfill.daemon.errors import DesktopUnavailable, InsertError
from anyfill.daemon.wayland.connection import roundtrip
from anyfill.daemon.wayland.keymap import (
    FORMAT_XKB_V1,
    MODIFIER_KEYS,
    MODIFIER_MASKS,
    Keymap,
)
from anyfill.daemon.wayland.keysyms import parse_chord
from anyfill.daemon.wayland.session import compositor, display_path

if TYPE_CHECKING:
    from pywayland.client.display import Display

    from anyfill.daemon.wayland.protocols.virtual_keyboard_unstable_v1 import (
        ZwpVirtualKeyboardV1Proxy,
    )

log = logging.getLogger("anyfill.wayland.keys")

TIMEOUT_S = 5.0
ROUNDTRIP_TIMEOUT_S = 2.0
"""A compositor that has not answered by then is taken as gone (the worker thread never
stays blocked in libwayland: a display freed under it would crash the daemon)."""
REFRESH_AFTER_S = 1.0
"""A batch of keys after this long idle uploads the keymap again first: ``swaymsg reload``
(or a change of input settings) puts the compositor's own keymap on every keyboard, ours
included, and would leave our extra keys without symbols."""
SETTLE_S = 0.1
"""A new keymap waits this long after the last keys: GTK handled keys of ours after a
keymap that followed them had arrived, and lost them (2 sequences in 30 here)."""
PRESSED, RELEASED = 1, 0
"""``wl_keyboard.key_state``."""
R = TypeVar("R")


class VirtualKeyboard:
    """``async with VirtualKeyboard(environ) as keys:``; DesktopUnavailable when the
    compositor offers no virtual keyboard to us (then wtype or a portal is tried)."""

    name = "virtual keyboard (anyfill's own, zwp_virtual_keyboard_v1)"

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._path = display_path(environ)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="anyfill-vkbd")
        self._lock = asyncio.Lock()
        self._keymap = Keymap()
        self._display: Display | None = None
        self._keyboard: ZwpVirtualKeyboardV1Proxy | None = None
        self._proxies: list[Any] = []
        """Registry, seat and manager: held, and destroyed on the worker thread before the
        display (pywayland frees a proxy whenever the garbage collector gets to it)."""
        self._injecting = 0
        self._broken = ""
        self._keymap_fresh_at = 0.0

    async def __aenter__(self) -> VirtualKeyboard:
        try:
            await self._call(self._connect)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await self._call(self._disconnect)
            self._executor.shutdown(wait=False)
            if isinstance(exc, InsertError):
                raise DesktopUnavailable(str(exc)) from exc
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(Exception):
            await self._call(self._disconnect)
        self._executor.shutdown(wait=False)

    @property
    def injecting(self) -> bool:
        return self._injecting > 0

    async def press(self, chord: str) -> None:
        mods, key = parse_chord(chord)
        code = self._keymap.chord_key(key)
        upload = False
        if code is None:  # a key the US layout lacks ("<ctrl>+ä"): an extra key carries it
            if len(key) != 1:
                raise InsertError(f"no key {key!r} on the virtual keyboard")
            upload = self._keymap.add(key)
            code, _ = self._keymap.text_key(key)
        await self._send(_chord_events(mods, code), upload)

    async def type_text(self, text: str) -> bool:
        text = text.replace("\r\n", "\n")
        upload = self._keymap.add(text)
        events: list[tuple[str, int]] = []
        for char in text:
            code, shifted = self._keymap.text_key(char)
            events += _chord_events(["shift"] if shifted else [], code)
        await self._send(events, upload)
        return True

    async def wait_released(self, timeout_s: float) -> bool:
        return True  # Wayland shows no client the keyboard's state (docs/wayland.md)

    # -- the worker thread ------------------------------------------------------------

    async def _send(self, events: list[tuple[str, int]], upload: bool) -> None:
        if self._broken:
            await self._call(self._reconnect)
        self._injecting += 1
        try:
            await self._call(self._emit, events, upload)
        finally:
            self._injecting -= 1

    async def _call(self, func: Callable[..., R], *args: Any) -> R:
        async with self._lock:
            future = asyncio.get_running_loop().run_in_executor(self._executor, func, *args)
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    return await future
            except TimeoutError:
                self._broken = "the compositor did not answer"
                raise InsertError("the compositor did not take the keys in time") from None

    def _connect(self) -> None:
        from pywayland.client.display import Display
        from pywayland.protocol.wayland import WlSeat

        from anyfill.daemon.wayland.protocols.virtual_keyboard_unstable_v1 import (
            ZwpVirtualKeyboardManagerV1,
        )

        display = Display(str(self._path))
        try:
            display.connect()
        except ValueError:
            raise DesktopUnavailable(f"cannot connect to {self._path}") from None
        self._display = display
        globals_: dict[str, tuple[int, int]] = {}
        registry = display.get_registry()
        self._proxies.append(registry)

        def on_global(_registry: object, name: int, interface: str, version: int) -> None:
            globals_.setdefault(interface, (name, version))

        registry.dispatcher["global"] = on_global
        self._roundtrip("listing the globals")
        manager_name = ZwpVirtualKeyboardManagerV1.name
        if manager_name not in globals_ or "wl_seat" not in globals_:
            raise DesktopUnavailable(f"the compositor offers no {manager_name}")
        seat = registry.bind(globals_["wl_seat"][0], WlSeat, 1)
        manager = registry.bind(globals_[manager_name][0], ZwpVirtualKeyboardManagerV1, 1)
        self._proxies += [seat, manager]
        self._keyboard = manager.create_virtual_keyboard(seat)
        self._upload()
        self._roundtrip("creating the virtual keyboard")

    def _reconnect(self) -> None:
        """After the compositor dropped us (a keymap it refused, a restart): once more."""
        log.info("virtual keyboard: connecting again (%s)", self._broken)
        self._disconnect()
        try:
            self._connect()
        except DesktopUnavailable as exc:
            raise InsertError(f"the virtual keyboard is gone: {exc}") from exc
        self._broken = ""

    def _upload(self) -> None:
        assert self._keyboard is not None
        data = self._keymap.text().encode() + b"\0"
        fd = os.memfd_create("anyfill-keymap", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            self._keyboard.keymap(FORMAT_XKB_V1, fd, len(data))
            self._flush()  # the fd is duplicated when the request goes out
        finally:
            os.close(fd)
        self._keymap_fresh_at = time.monotonic()

    def _emit(self, events: list[tuple[str, int]], upload: bool) -> None:
        keyboard = self._keyboard
        assert keyboard is not None
        idle = time.monotonic() - self._keymap_fresh_at
        if upload and idle < SETTLE_S:
            time.sleep(SETTLE_S - idle)  # GTK loses keys whose keymap is replaced too soon
        if upload or idle > REFRESH_AFTER_S:
            self._upload()
        for kind, value in events:
            stamp = int(time.monotonic() * 1000) & 0xFFFFFFFF
            if kind == "key_down":
                keyboard.key(stamp, value, PRESSED)
            elif kind == "key_up":
                keyboard.key(stamp, value, RELEASED)
            else:
                keyboard.modifiers(value, 0, 0, 0)
        self._roundtrip("sending keys")
        self._keymap_fresh_at = time.monotonic()

    def _flush(self) -> None:
        assert self._display is not None
        if self._display.flush() < 0:
            self._fail("sending to the compositor")

    def _roundtrip(self, doing: str) -> None:
        assert self._display is not None
        problem = roundtrip(self._display, ROUNDTRIP_TIMEOUT_S)
        if problem:
            self._fail(f"{doing} ({problem})")

    def _fail(self, doing: str) -> None:
        self._broken = f"the compositor failed us while {doing}"
        raise InsertError(self._broken)

    def _disconnect(self) -> None:
        display, self._display = self._display, None
        keyboard, self._keyboard = self._keyboard, None
        if display is None:
            return
        if keyboard is not None and not self._broken:
            keyboard.destroy()
            display.flush()
        elif keyboard is not None:
            keyboard._destroy()  # the compositor is gone: nothing to tell it
        for proxy in reversed(self._proxies):
            proxy._destroy()
        self._proxies = []
        display.disconnect()


def _chord_events(mods: list[str], code: int) -> list[tuple[str, int]]:
    """Modifier keys down with the state after each, the key, then all of it backwards."""
    events: list[tuple[str, int]] = []
    state = 0
    for mod in mods:
        state |= MODIFIER_MASKS[mod]
        events += [("key_down", MODIFIER_KEYS[mod]), ("modifiers", state)]
    events += [("key_down", code), ("key_up", code)]
    for mod in reversed(mods):
        state &= ~MODIFIER_MASKS[mod]
        events += [("key_up", MODIFIER_KEYS[mod]), ("modifiers", state)]
    return events


def pywayland_missing() -> str:
    """Why pywayland cannot be used here ('' when it can)."""
    try:
        import pywayland.client.display  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"pywayland is not installed ({exc})"
    return ""


async def open_virtual_keyboard(
    stack: AsyncExitStack, environ: Mapping[str, str]
) -> VirtualKeyboard | None:
    """Our own virtual keyboard, held by ``stack``; None (the reason logged) where the
    compositor offers none or pywayland is missing."""
    missing = pywayland_missing()
    if compositor(environ) in ("gnome", "kde"):
        missing = "GNOME and KDE offer no virtual keyboard to applications"
    if missing:
        log.info("no virtual keyboard of our own: %s", missing)
        return None
    try:
        return await stack.enter_async_context(VirtualKeyboard(environ))
    except DesktopUnavailable as exc:
        log.info("no virtual keyboard of our own: %s", exc)
        return None


async def virtual_keyboard_offered(environ: Mapping[str, str]) -> str:
    """For doctor, read-only (no keyboard is created): '' when the compositor offers the
    virtual keyboard to us, else why not."""
    try:
        async with asyncio.timeout(TIMEOUT_S):
            return await asyncio.to_thread(_offered, environ)
    except TimeoutError:
        return "the compositor did not answer"


def _offered(environ: Mapping[str, str]) -> str:
    missing = pywayland_missing()
    if missing:
        return missing
    from pywayland.client.display import Display

    display = Display(str(display_path(environ)))
    try:
        display.connect()
    except ValueError:
        return f"cannot connect to {display_path(environ)}"
    try:
        names: set[str] = set()
        registry = display.get_registry()

        def on_global(_registry: object, _name: int, interface: str, _version: int) -> None:
            names.add(interface)

        registry.dispatcher["global"] = on_global
        problem = roundtrip(display, ROUNDTRIP_TIMEOUT_S)
        registry._destroy()
    finally:
        display.disconnect()
    if problem:
        return f"the compositor did not list its globals ({problem})"
    if "zwp_virtual_keyboard_manager_v1" not in names:
        return "the compositor offers no zwp_virtual_keyboard_manager_v1"
    return ""

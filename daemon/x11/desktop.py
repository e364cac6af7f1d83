"""Builds the X11 desktop: one connection shared by keys, clipboard, windows and hotkeys."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from types import TracebackType

from anyfill.daemon.desktop.hotkeys import Action, Hotkey, Trigger
from anyfill.daemon.desktop.ports import Desktop
from anyfill.daemon.x11.connection import XConnection
from anyfill.daemon.x11.grab import X11Hotkeys
from anyfill.daemon.x11.keeper import Keeper
from anyfill.daemon.x11.keyboard import X11Keys
from anyfill.daemon.x11.preview_input import X11PreviewInput
from anyfill.daemon.x11.selection import X11Clipboard
from anyfill.daemon.x11.windows import X11Windows


class X11Desktop:
    """``async with X11Desktop(bindings, on_trigger) as desktop:`` grabs hotkeys and serves."""

    def __init__(
        self,
        bindings: Mapping[Action, Hotkey],
        on_trigger: Trigger,
        display_name: str | None = None,
    ) -> None:
        self._bindings = bindings
        self._on_trigger = on_trigger
        self._conn = XConnection(display_name)
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Desktop:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self._conn)
            keys = X11Keys(self._conn)
            keeper = Keeper()
            await keeper.start(self._conn.window.id)
            stack.push_async_callback(keeper.close)
            clipboard = X11Clipboard(self._conn, keeper)
            stack.push_async_callback(self._hand_over, clipboard)
            hotkeys = await stack.enter_async_context(
                X11Hotkeys(self._conn, keys, self._bindings, self._on_trigger)
            )
            desktop = Desktop(
                keys,
                clipboard,
                X11Windows(self._conn),
                lost=self._conn.lost,
                hotkeys=hotkeys,
                preview_input=X11PreviewInput(self._conn, keys),
                problems=list(hotkeys.refused),
            )
            self._stack = stack.pop_all()
        return desktop

    async def _hand_over(self, clipboard: X11Clipboard) -> None:
        if not self._conn.lost.is_set():
            await clipboard.hand_over()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

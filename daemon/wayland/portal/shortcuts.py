"""Global hotkeys through the GlobalShortcuts portal (KDE Plasma 5.27+, GNOME 48+, Hyprland).

The desktop asks the user to confirm or change the triggers once; afterwards they work in
every window. Known quirks handled here:

- GNOME's ``ListShortcuts`` may answer nothing even for bound shortcuts: a short or empty
  list is not trusted, the shortcuts are bound again (the desktop keeps the user's choice).
- The desktop may close the session (``Session.Closed``, e.g. when the portal restarts):
  a new session is created and the shortcuts bound again, after a pause that grows.
- KDE Plasma 5.27's portal registers shortcuts only from ``CreateSession``'s ``shortcuts``
  option (an early draft of the interface); its ``BindShortcuts`` just opens System
  Settings. The shortcuts go in both, and ``BindShortcuts`` is skipped when the session
  already lists them all.
- xdg-desktop-portal 1.16 does not close a session when KDE's backend exits (a crash, an
  update): the shortcuts just stop. The backend's name leaving the bus counts as a close.
- KDE names the shortcuts' group (in System Settings and in kglobalaccel) after the
  application id and the session token; a host application has no id, so the token is
  always :data:`SESSION_TOKEN`: the user's chosen keys are found again at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from dbus_fast import Variant

from anyfill.daemon.desktop.hotkeys import Action, Hotkey, Trigger
from anyfill.daemon.wayland.keysyms import key_name
from anyfill.daemon.wayland.portal.bus import SESSION, PortalBus, PortalError

log = logging.getLogger("anyfill.wayland.shortcuts")

INTERFACE = "org.freedesktop.portal.GlobalShortcuts"
DESCRIPTIONS: dict[Action, str] = {
    "complete": "anyfill: complete at the caret",
    "preview": "anyfill: complete with a preview",
    "cancel": "anyfill: cancel the running completion",
}
RETRY_S = (1.0, 5.0, 30.0)
KDE_BACKEND = "org.freedesktop.impl.portal.desktop.kde"
BUS, BUS_PATH = "org.freedesktop.DBus", "/org/freedesktop/DBus"
SESSION_TOKEN = "anyfill"
"""Fixed, not per process: KDE keeps the user's keys under a name made from it."""
_XDG_MODIFIERS = {"ctrl": "CTRL", "shift": "SHIFT", "alt": "ALT", "cmd": "LOGO"}


def xdg_trigger(hotkey: Hotkey) -> str:
    """The XDG shortcuts-spec form of a hotkey: ``CTRL+ALT+space``."""
    mods = [_XDG_MODIFIERS[mod] for mod in hotkey.modifiers]
    return "+".join([*mods, key_name(hotkey.key)])


class PortalHotkeys:
    """``async with PortalHotkeys(portal, bindings, on_trigger)``: bound while inside."""

    def __init__(
        self, portal: PortalBus, bindings: Mapping[Action, Hotkey], on_trigger: Trigger
    ) -> None:
        self._portal = portal
        self._bindings = dict(bindings)
        self._on_trigger = on_trigger
        self._session = ""
        self._renew: asyncio.Task[None] | None = None
        self._binding: asyncio.Task[None] | None = None
        self.triggers: dict[str, str] = {}
        """Shortcut id -> how the desktop says it is triggered (after binding)."""
        self.bound = asyncio.Event()
        """Set once the shortcuts are bound (the desktop may first ask the user)."""

    @staticmethod
    async def available(portal: PortalBus) -> bool:
        return await portal.version(INTERFACE) >= 1

    async def __aenter__(self) -> PortalHotkeys:
        await self._portal.subscribe(INTERFACE, "Activated", self._on_activated)
        await self._portal.subscribe(BUS, "NameOwnerChanged", self._on_owner, path=BUS_PATH)
        # Binding may wait for the user to answer the desktop's dialog: the daemon (and
        # `anyfill trigger`) work meanwhile.
        self._binding = asyncio.get_running_loop().create_task(self._first_bind())
        return self

    async def _first_bind(self) -> None:
        try:
            await self._open()
        except PortalError as exc:
            log.warning("global shortcuts through the portal failed: %s", exc)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in (self._renew, self._binding):
            if task is not None:
                task.cancel()
        await self._portal.unsubscribe(INTERFACE, "Activated", self._on_activated)
        await self._portal.unsubscribe(BUS, "NameOwnerChanged", self._on_owner, path=BUS_PATH)
        if self._session:
            await self._portal.unsubscribe(SESSION, "Closed", self._on_closed, path=self._session)
            try:
                await self._portal.call(SESSION, "Close", path=self._session)
            except PortalError as error:
                log.debug("closing the shortcuts session: %s", error)
            self._session = ""

    async def _open(self) -> None:
        shortcuts = [
            [
                action,
                {
                    "description": Variant("s", DESCRIPTIONS[action]),
                    "preferred_trigger": Variant("s", xdg_trigger(hotkey)),
                },
            ]
            for action, hotkey in self._bindings.items()
        ]
        results = await self._portal.request(
            INTERFACE,
            "CreateSession",
            "",
            [],
            {
                "session_handle_token": Variant("s", SESSION_TOKEN),
                "shortcuts": Variant("a(sa{sv})", shortcuts),  # KDE 5.27 binds these
            },
        )
        self._session = str(results["session_handle"])
        await self._portal.subscribe(SESSION, "Closed", self._on_closed, path=self._session)
        listed = await self._list()
        if set(listed) >= set(self._bindings):
            self.triggers = listed
            log.info("global shortcuts bound: %s", _describe(listed))
            self.bound.set()
            return
        results = await self._portal.request(
            INTERFACE,
            "BindShortcuts",
            "oa(sa{sv})s",
            [self._session, shortcuts, ""],
            {},
        )
        self.triggers = _triggers(results.get("shortcuts", []))
        log.info("global shortcuts bound through the portal: %s", _describe(self.triggers))
        self.bound.set()

    async def _list(self) -> dict[str, str]:
        try:
            results = await self._portal.request(
                INTERFACE, "ListShortcuts", "o", [self._session], {}, timeout_s=5.0
            )
        except PortalError as exc:
            log.debug("ListShortcuts: %s", exc)
            return {}
        return _triggers(results.get("shortcuts", []))

    def _on_activated(self, args: list[Any]) -> None:
        session, shortcut = str(args[0]), str(args[1])
        if session != self._session:
            return
        for action in self._bindings:
            if action == shortcut:
                log.debug("portal shortcut %s activated", action)
                self._on_trigger(action)

    def _on_owner(self, args: list[Any]) -> None:
        name, new_owner = str(args[0]), str(args[2])
        if name == KDE_BACKEND and not new_owner and self._session:
            log.info("KDE's portal backend exited; binding the shortcuts again")
            self._on_closed([])

    def _on_closed(self, args: list[Any]) -> None:
        if self._renew is None or self._renew.done():
            self._renew = asyncio.get_running_loop().create_task(self._reopen())

    async def _reopen(self) -> None:
        old, self._session = self._session, ""
        await self._portal.unsubscribe(SESSION, "Closed", self._on_closed, path=old)
        # Gone already when the desktop closed it; still there when the backend died.
        with contextlib.suppress(PortalError):
            await self._portal.call(SESSION, "Close", path=old)
        for pause in RETRY_S:
            await asyncio.sleep(pause)
            try:
                await self._open()
            except PortalError as exc:
                log.warning("re-creating the shortcuts session failed: %s", exc)
                continue
            log.info("the desktop closed the shortcuts session; a new one is bound")
            return
        log.error("global shortcuts are lost; restart anyfill or use 'anyfill trigger'")


def _triggers(shortcuts: list[Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in shortcuts:
        shortcut_id, props = item[0], item[1]
        found[str(shortcut_id)] = str(props.get("trigger_description", ""))
    return found


def _describe(triggers: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value or '(unset)'}" for key, value in triggers.items())

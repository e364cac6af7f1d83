"""The preview popup's keys and the user's activity on Wayland: on sway through its IPC;
on other compositors with a layer shell, no keys (:class:`TriggerPreviewInput`).

No Wayland client may grab keys. sway can bind them for us: while the popup shows, each
popup key is bound as ``bindsym <key> nop anyfill-preview <token> <name>`` and comes back
as a ``binding`` event on a subscription (no process started per key); the bindings are
removed the moment the popup closes, on errors, and at the daemon's exit, and a crash's
leftovers are removed at the next start (they are written down first). A key the user
already bound in the sway config is left alone: the popup goes without it, the log says
so, and ``anyfill preview accept|dismiss|next|previous`` does the same from any binding.

The popup closes when sway reports another window focused (``window`` events) and when
the target application's text or caret changes (AT-SPI events: the user typed).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import select
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from anyfill.daemon.atspi.events import AtspiTextEvents
from anyfill.daemon.context import CaretRect, ScreenArea
from anyfill.daemon.desktop.hotkeys import Hotkey
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.errors import DesktopUnavailable
from anyfill.daemon.wayland.kwin import KWinFocus
from anyfill.daemon.wayland.session import (
    compositor,
    display_path,
    has_virtual_keyboard,
    runtime_dir,
)
from anyfill.daemon.wayland.sway_bindings import normalized, sway_combo, user_bindings
from anyfill.daemon.wayland.sway_ipc import SwayEvents, SwayIpc, SwayIpcError

log = logging.getLogger("anyfill.wayland.preview")

PREFIX = "anyfill-preview"
"""The word after ``nop`` that marks our bindings."""


async def watch_typing(on_activity: Callable[[str, int], None]) -> None:
    """Report ("text", pid) for each AT-SPI text change or caret move until cancelled."""
    try:
        async with AtspiTextEvents(lambda pid: on_activity("text", pid)):
            await asyncio.Event().wait()
    except (OSError, RuntimeError, TimeoutError, ValueError) as exc:
        log.info("no AT-SPI text events, so typing does not close the popup: %s", exc)


class TriggerPreviewInput:
    """The popup's port where no compositor IPC can take its keys (KWin, Hyprland and other
    compositors with a layer shell but no sway IPC): the popup shows at a fixed place
    (subclasses place it at the caret), the preview shortcut pressed again inserts, the
    cancel shortcut dismisses; typing (AT-SPI) and focus changes (the focus guard's
    source) close it."""

    REASON = "no compositor IPC takes keys here: press the preview shortcut again"

    def __init__(self) -> None:
        self._refused: dict[str, str] = {}

    @property
    def refused_keys(self) -> dict[str, str]:
        return dict(self._refused)

    async def grab_keys(
        self, bindings: Mapping[str, Hotkey], on_key: Callable[[str], None]
    ) -> frozenset[int]:
        self._refused = dict.fromkeys(bindings, self.REASON)
        return frozenset()

    async def release_keys(self) -> None:
        return None

    def watch_activity(self, on_activity: Callable[[str, int], None]) -> Callable[[], None]:
        typing = asyncio.get_running_loop().create_task(
            watch_typing(on_activity), name="preview-typing"
        )

        def stop() -> None:
            typing.cancel()

        return stop

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        return None, None  # AT-SPI's caret is window-relative and the window's place unknown


class HyprlandPreviewInput(TriggerPreviewInput):
    """As :class:`TriggerPreviewInput`, placed at the caret from Hyprland's IPC
    (``j/activewindow``: ``at``/``size``; ``j/monitors``). Untested against a real Hyprland:
    written from its documented replies; anything unexpected falls back to the fixed place."""

    def __init__(self, socket_path: Path) -> None:
        super().__init__()
        self._path = socket_path

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        try:
            window = await self._ask(b"j/activewindow")
            monitors = await self._ask(b"j/monitors")
            address = int(str(window["address"]), 16)
            left, top = (int(v) for v in window["at"])
            monitor = next(m for m in monitors if m["id"] == window["monitor"])
            scale = float(monitor.get("scale") or 1.0)
            screen = ScreenArea(
                str(monitor["name"]),
                int(monitor["x"]),
                int(monitor["y"]),
                round(int(monitor["width"]) / scale),
                round(int(monitor["height"]) / scale),
            )
        except (OSError, ValueError, KeyError, TypeError, StopIteration, TimeoutError) as exc:
            log.debug("no window position from Hyprland: %s", exc)
            return None, None
        if address != target.window_id:
            return None, None  # the focus moved since the press
        return on_screen(caret, left, top), screen

    async def _ask(self, request: bytes) -> Any:
        async with asyncio.timeout(1.0):
            reader, writer = await asyncio.open_unix_connection(str(self._path))
            try:
                writer.write(request)
                await writer.drain()
                return json.loads(await reader.read())
            finally:
                writer.close()


class KWinPreviewInput(TriggerPreviewInput):
    """As :class:`TriggerPreviewInput`, placed at the caret on KDE Plasma: our KWin script
    (:class:`~anyfill.daemon.wayland.kwin.KWinFocus`) reports the active window's surface
    position and output, to which AT-SPI's window-relative caret is added."""

    def __init__(self, kwin: KWinFocus) -> None:
        super().__init__()
        self._kwin = kwin

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        place = await asyncio.to_thread(self._kwin.place)
        if place is None or place.window_id != target.window_id:
            log.debug("no window position from KWin for window %s", target.window_id)
            return None, None  # KWin did not answer, or the focus moved since the press
        return on_screen(caret, place.x, place.y), place.screen


class SwayPreviewInput:
    """The :class:`~anyfill.daemon.desktop.ports.PreviewInput` port on sway."""

    def __init__(self, socket_path: str, state_dir: Path) -> None:
        self._ipc = SwayIpc(socket_path)
        self._socket_path = socket_path
        digest = hashlib.sha1(socket_path.encode(), usedforsecurity=False).hexdigest()[:12]
        self._state = state_dir / f"sway-preview-keys-{digest}.json"
        self._tokens = itertools.count(1)
        self._token = ""
        self._bound: list[str] = []
        self._events: SwayEvents | None = None
        self._on_key: Callable[[str], None] | None = None
        self._on_activity: Callable[[str, int], None] | None = None
        self._typing: asyncio.Task[None] | None = None
        self._refused: dict[str, str] = {}
        self._warned: set[str] = set()

    @property
    def refused_keys(self) -> dict[str, str]:
        return dict(self._refused)

    @property
    def bound(self) -> tuple[str, ...]:
        """The combinations bound in sway right now (for doctor and the tests' logs)."""
        return tuple(self._bound)

    # -- keys -----------------------------------------------------------------------------

    async def clear_leftovers(self) -> None:
        """Remove bindings a previous run could not (it was killed), as written down."""
        try:
            combos = json.loads(self._state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(combos, list) and combos:
            with contextlib.suppress(SwayIpcError):
                # One the user bound in the config since (and reloaded) is theirs now.
                taken = user_bindings(await self._ipc.config())
                ours = [c for c in map(str, combos) if normalized(c) not in taken]
                log.info(
                    "removing %d popup key binding(s) left in sway by a previous run", len(ours)
                )
                if ours:
                    await self._ipc.command("; ".join(f"unbindsym {c}" for c in ours))
        self._state.unlink(missing_ok=True)

    async def grab_keys(
        self, bindings: Mapping[str, Hotkey], on_key: Callable[[str], None]
    ) -> frozenset[int]:
        await self.release_keys()
        try:
            await self._bind(bindings, on_key)
        except BaseException as exc:
            await self.release_keys()  # what was bound before the failure goes too
            if isinstance(exc, SwayIpcError):
                raise DesktopUnavailable(f"cannot bind the popup keys in sway: {exc}") from exc
            raise
        return frozenset()  # sway takes the keys before any application: none to filter

    async def _bind(self, bindings: Mapping[str, Hotkey], on_key: Callable[[str], None]) -> None:
        taken = user_bindings(await self._ipc.config())
        self._refused = {}
        combos: dict[str, str] = {}
        for name, hotkey in bindings.items():
            combo = sway_combo(hotkey)
            if normalized(combo) in taken:
                self._refused[name] = f"{combo} is bound in your sway config"
                self._warn_taken(name, combo)
            else:
                combos[name] = combo
        self._token = f"{os.getpid()}-{next(self._tokens)}"
        self._on_key = on_key
        self._events = SwayEvents(self._socket_path, self._on_event)
        await self._events.open(["binding", "window"])
        self._write_state([*combos.values()])
        self._bound = [*combos.values()]  # from here on, release_keys unbinds them
        commands = [
            f"bindsym {combo} nop {PREFIX} {self._token} {name}" for name, combo in combos.items()
        ]
        results = await self._ipc.command("; ".join(commands)) if commands else []
        failed = [r.get("error", "refused") for r in results if not r.get("success")]
        if failed:
            raise DesktopUnavailable(f"sway refused the popup keys: {'; '.join(failed)}")
        log.debug("popup keys bound in sway: %s", ", ".join(self._bound))

    async def release_keys(self) -> None:
        bound, self._bound = self._bound, []
        events, self._events = self._events, None
        self._on_key = None
        try:
            if bound:
                results = await self._ipc.command("; ".join(f"unbindsym {c}" for c in bound))
                failed = [c for c, r in zip(bound, results, strict=False) if not r.get("success")]
                if failed:
                    log.warning("sway kept popup key binding(s) %s", ", ".join(failed))
                else:
                    self._state.unlink(missing_ok=True)
                log.debug("popup keys unbound in sway: %s", ", ".join(bound))
        except SwayIpcError as exc:
            log.warning("could not remove the popup keys from sway (next start will): %s", exc)
        finally:
            if events is not None:
                await events.close()

    def _write_state(self, combos: list[str]) -> None:
        try:
            self._state.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._state.write_text(json.dumps(combos), encoding="utf-8")
        except OSError as exc:
            log.debug("cannot note the popup keys in %s: %s", self._state, exc)

    def _warn_taken(self, name: str, combo: str) -> None:
        if combo in self._warned:
            return
        self._warned.add(combo)
        command = "accept" if name.startswith("accept") else name
        log.warning(
            "the preview key %s is bound in your sway config, so anyfill leaves it to you; "
            "bind another key to 'exec anyfill preview %s', or choose another key in [ui]",
            combo,
            command,
        )

    def _on_event(self, kind: str, payload: Mapping[str, Any]) -> None:
        if kind == "binding":
            command = str((payload.get("binding") or {}).get("command") or "")
            words = command.split()
            if len(words) == 4 and words[1:3] == [PREFIX, self._token] and self._on_key:
                self._on_key(words[3])
        elif kind == "window" and payload.get("change") == "focus":
            container = payload.get("container") or {}
            if self._on_activity is not None and isinstance(container.get("id"), int):
                self._on_activity("focus", int(container["id"]))

    # -- activity -------------------------------------------------------------------------

    def watch_activity(self, on_activity: Callable[[str, int], None]) -> Callable[[], None]:
        self._on_activity = on_activity
        typing = asyncio.get_running_loop().create_task(
            watch_typing(on_activity), name="preview-typing"
        )
        self._typing = typing

        def stop() -> None:
            if self._on_activity is on_activity:
                self._on_activity = None
            typing.cancel()

        return stop

    # -- where --------------------------------------------------------------------------

    async def locate(
        self, target: Target, caret: CaretRect | None
    ) -> tuple[CaretRect | None, ScreenArea | None]:
        """AT-SPI's caret is relative to the window on Wayland: add the window's place in
        sway's layout."""
        try:
            tree = await self._ipc.tree()
        except SwayIpcError as exc:
            log.debug("no window position from sway: %s", exc)
            return None, None
        for node, output in _walk(tree, None):
            if node.get("id") != target.window_id:
                continue
            rect, inner = node.get("rect") or {}, node.get("window_rect") or {}
            left = int(rect.get("x", 0)) + int(inner.get("x", 0))
            top = int(rect.get("y", 0)) + int(inner.get("y", 0))
            return on_screen(caret, left, top), _screen(output)
        return None, None


def on_screen(caret: CaretRect | None, left: int, top: int) -> CaretRect:
    """AT-SPI's window-relative ``caret`` moved to the window's place (``left``, ``top``)
    on screen; without a caret, the window's top-left corner stands in for it."""
    if caret is None:
        return CaretRect(left, top, 1, 1)
    return CaretRect(left + caret.x, top + caret.y, caret.width, caret.height)


def _walk(
    node: Mapping[str, Any], output: Mapping[str, Any] | None
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    if node.get("type") == "output":
        output = node
    yield node, output
    for child in (*node.get("nodes", ()), *node.get("floating_nodes", ())):
        yield from _walk(child, output)


def _screen(output: Mapping[str, Any] | None) -> ScreenArea | None:
    if output is None:
        return None
    rect = output.get("rect") or {}
    return ScreenArea(
        str(output.get("name") or ""),
        int(rect.get("x", 0)),
        int(rect.get("y", 0)),
        int(rect.get("width", 0)),
        int(rect.get("height", 0)),
    )


async def popup_input(
    environ: Mapping[str, str],
    keys: object,
    stack: contextlib.AsyncExitStack,
    kwin: KWinFocus | None = None,
) -> SwayPreviewInput | TriggerPreviewInput | None:
    """The popup's port for this session: sway's IPC (with a key route, which hands a key
    back to the application when there is nothing to accept); else, where the compositor
    has a layer shell, the preview shortcut again, placed at the caret through KWin
    (``kwin``: the focus source, when it answered) or Hyprland's IPC, else at a fixed
    place; else none (GNOME: the preview hotkey then inserts directly)."""
    from anyfill.daemon.runtime_dir import control_dir
    from anyfill.daemon.wayland.keys import NoKeys

    swaysock = environ.get("SWAYSOCK", "")
    if swaysock and not isinstance(keys, NoKeys):
        port = SwayPreviewInput(swaysock, Path(control_dir()))
        await port.clear_leftovers()
        stack.push_async_callback(port.release_keys)
        return port
    if swaysock or not await asyncio.to_thread(has_layer_shell, environ):
        return None
    if kwin is not None and not kwin.unavailable:
        return KWinPreviewInput(kwin)
    hyprland = hyprland_socket(environ)
    return HyprlandPreviewInput(hyprland) if hyprland is not None else TriggerPreviewInput()


def hyprland_socket(environ: Mapping[str, str]) -> Path | None:
    """Hyprland's request socket, where this is a Hyprland session."""
    signature = environ.get("HYPRLAND_INSTANCE_SIGNATURE", "")
    if not signature:
        return None
    for base in (runtime_dir(environ) / "hypr", Path("/tmp/hypr")):
        path = base / signature / ".socket.sock"
        if path.exists():
            return path
    return None


def has_layer_shell(environ: Mapping[str, str], timeout_s: float = 1.0) -> bool:
    """Whether the compositor offers wlr-layer-shell (GNOME does not): the registry on a
    connection of our own, waited for at most ``timeout_s`` (a compositor that does not
    answer must not hold up the start)."""
    try:
        from pywayland.client.display import Display
    except ImportError:
        return False
    display = Display(str(display_path(environ)))
    try:
        display.connect()
    except Exception:  # noqa: BLE001 - pywayland raises a bare exception
        return False
    names: list[str] = []
    answered: list[bool] = []
    try:
        registry = display.get_registry()
        registry.dispatcher["global"] = lambda _r, _n, interface, _v: names.append(interface)
        done = display.sync()  # answered after every global was announced
        done.dispatcher["done"] = lambda _c, _serial: answered.append(True)
        display.flush()
        deadline = time.monotonic() + timeout_s
        while not answered and (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([display.get_fd()], [], [], left)
            if not readable:
                break
            display.read()
            display.dispatch(block=False)
    except (OSError, RuntimeError) as exc:
        log.debug("no answer from the Wayland display: %s", exc)
    finally:
        display.disconnect()
    return bool(answered) and "zwlr_layer_shell_v1" in names


def popup_line(environ: Mapping[str, str], *, kwin: bool = False) -> tuple[Literal["ok"], str, str]:
    """The doctor's line for the preview popup (``kwin``: KWin is on the session bus)."""
    # sway's own virtual keyboard protocol (our key route), else wtype, sends the keys.
    installed = has_virtual_keyboard(compositor(environ)) or shutil.which("wtype") is not None
    layer_shell = has_layer_shell(environ)
    return (
        "ok",
        "preview popup",
        popup_route(environ, installed=installed, layer_shell=layer_shell, kwin=kwin),
    )


def popup_route(
    environ: Mapping[str, str], *, installed: bool, layer_shell: bool, kwin: bool = False
) -> str:
    """What the preview hotkey shows in this session (``installed``: a key route is there;
    ``kwin``: KWin tells where the focused window is)."""
    if environ.get("SWAYSOCK"):
        if installed:
            return (
                "at the caret on a layer surface (wlr-layer-shell), its keys bound through "
                "sway's IPC while it shows (with `anyfill run`)"
            )
        return "none without a key route (see keys); the preview hotkey inserts directly"
    if layer_shell and kwin:
        return (
            "at the caret (the window's place from KWin, through anyfill's KWin script) on "
            "a layer surface; the preview shortcut again inserts, the cancel shortcut "
            "dismisses"
        )
    if layer_shell and hyprland_socket(environ) is not None:
        return (
            "at the caret (Hyprland IPC; untested) on a layer surface; the preview shortcut "
            "again inserts, the cancel shortcut dismisses"
        )
    if layer_shell:
        return (
            "at the top of the screen on a layer surface (no compositor IPC for the caret's "
            "window); the preview shortcut again inserts, the cancel shortcut dismisses"
        )
    return "none on this compositor (no layer shell): the preview hotkey inserts directly"

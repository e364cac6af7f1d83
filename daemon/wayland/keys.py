"""Key events on Wayland through wtype (the virtual-keyboard protocol of wlroots
compositors), where our own virtual keyboard (virtual_keyboard.py) cannot be used.

Wayland has no global keyboard state a client may read, so ``wait_released`` cannot see
the user's modifiers: bind ``anyfill trigger`` on key release where the compositor allows
it (sway ``bindsym --release``), see docs/wayland.md. AT-SPI insertion sends no keys at
all and is tried first.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess

from anyfill.daemon.errors import InsertError
from anyfill.daemon.wayland.keysyms import MODIFIERS, key_name, parse_chord

log = logging.getLogger("anyfill.wayland.keys")

TIMEOUT_S = 5.0
SETTLE_MS = 100


class WtypeKeys:
    """The :class:`~anyfill.daemon.desktop.ports.Keys` port through ``wtype``."""

    def __init__(self) -> None:
        self._injecting = 0

    @staticmethod
    def installed() -> bool:
        return shutil.which("wtype") is not None

    @property
    def injecting(self) -> bool:
        return self._injecting > 0

    async def press(self, chord: str) -> None:
        mods, key = parse_chord(chord)
        args: list[str] = []
        for mod in mods:
            args += ["-M", MODIFIERS[mod][0]]
        args += ["-k", key_name(key)]
        for mod in reversed(mods):
            args += ["-m", MODIFIERS[mod][0]]
        # wtype's keymap holds only the keysyms named, in order, and GTK 3 never finds the
        # key on a keymap's highest keycode (daemon/wayland/keymap.py): one more keysym,
        # named by the release of a key that is not down (the compositor drops it), keeps
        # the chord's key off that keycode.
        pad = "Hyper_R" if key_name(key) != "Hyper_R" else "Hyper_L"
        args += ["-p", pad]
        # Each wtype brings its own keymap; one that replaces ours before GTK handled the
        # chord loses it: stay a moment, so the next keymap comes later.
        args += ["-s", str(SETTLE_MS)]
        await self._wtype(args)

    async def type_text(self, text: str) -> bool:
        await self._wtype(["--", text])
        return True

    async def wait_released(self, timeout_s: float) -> bool:
        return True  # not observable on Wayland; see the module docstring

    async def _wtype(self, args: list[str]) -> None:
        self._injecting += 1
        try:
            process = await asyncio.create_subprocess_exec(
                "wtype",
                *args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    _, err = await process.communicate()
            except TimeoutError:
                process.kill()
                await process.wait()
                raise InsertError("wtype did not finish sending keys") from None
        finally:
            self._injecting -= 1
        if process.returncode != 0:
            raise InsertError(f"wtype failed: {err.decode(errors='replace').strip()}")


class NoKeys:
    """Where no key route exists: every key action fails with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    @property
    def injecting(self) -> bool:
        return False

    async def press(self, chord: str) -> None:
        raise InsertError(f"cannot send {chord}: {self.reason}")

    async def type_text(self, text: str) -> bool:
        raise InsertError(f"cannot type: {self.reason}")

    async def wait_released(self, timeout_s: float) -> bool:
        return True

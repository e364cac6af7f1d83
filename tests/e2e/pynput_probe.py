"""Runs PynputHotkeys (the macOS / Windows hotkey source) on X11 and prints what fires.

Prints READY once listening, then one ``TRIGGER <action>`` per hotkey press; after
``--inject`` it presses the combination itself through pynput while marked as
injecting (such presses must not fire), then prints INJECTED.
"""

from __future__ import annotations

import asyncio
import sys

from anyfill.daemon.desktop.hotkeys import PynputHotkeys, parse_hotkey


async def main() -> None:
    injecting = False
    source = PynputHotkeys(
        {"complete": parse_hotkey("<ctrl>+<alt>+y")},  # grabbed by no other test
        lambda action: print("TRIGGER", action, flush=True),
        lambda: injecting,
    )
    async with source:
        print("READY", flush=True)
        await asyncio.sleep(float(sys.argv[1]))
        from pynput.keyboard import Controller, Key

        keyboard = Controller()
        injecting = True
        with keyboard.pressed(Key.ctrl, Key.alt):
            keyboard.press("y")
            keyboard.release("y")
        await asyncio.sleep(0.5)
        injecting = False
        print("INJECTED", flush=True)
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(main())

"""Windows drawn again, as the X DAMAGE extension shows them (daemon/x11/paints.py):
a focused Qt field draws its caret's blink, a stopped program draws nothing, and the
report a new watch gets for the whole window is no frame.

The capture waits for such a frame after its keys in a program that relays them to a
renderer (Chromium): tests/e2e/test_chromium_frozen.py."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from Xlib import X, display

from anyfill.daemon.x11.connection import XConnection
from anyfill.daemon.x11.windows import X11Windows
from tests.e2e.harness import QtTarget, XSession

pytestmark = pytest.mark.desktop


def drawn(x: XSession, window_id: int, timeout_s: float) -> bool:
    async def run() -> bool:
        async with XConnection(x.display) as conn:
            paints = await X11Windows(conn).watch_paints(window_id)
            assert paints is not None, "Xvfb has DAMAGE"
            try:
                return await paints.drawn(timeout_s)
            finally:
                paints.close()

    return asyncio.run(run())


def test_a_focused_qt_field_draws_its_caret_blink(x: XSession) -> None:
    target = QtTarget(x, "anyfill-paints-qt")
    try:
        x.focus(target.wid)
        assert drawn(x, target.wid, 3.0)  # Qt blinks every 500 ms
    finally:
        target.close()


def test_a_stopped_program_draws_nothing(x: XSession) -> None:
    target = QtTarget(x, "anyfill-paints-stopped")
    try:
        x.focus(target.wid)
        os.kill(target.process.pid, signal.SIGSTOP)
        try:
            assert not drawn(x, target.wid, 1.5)
        finally:
            os.kill(target.process.pid, signal.SIGCONT)
    finally:
        target.close()


def test_only_drawing_after_the_watch_began_counts(x: XSession) -> None:
    """A window of our own, mapped and never drawn into: the whole-window report a new
    damage object gets is not taken for a frame; a rectangle drawn into it is."""
    conn = display.Display(x.display)
    try:
        screen = conn.screen()
        window = screen.root.create_window(
            0, 0, 200, 100, 0, screen.root_depth, background_pixel=screen.white_pixel
        )
        window.map()
        conn.sync()
        assert not drawn(x, window.id, 0.5)

        async def draw_while_watching() -> bool:
            async with XConnection(x.display) as ours:
                paints = await X11Windows(ours).watch_paints(window.id)
                assert paints is not None
                try:
                    gc = window.create_gc(foreground=screen.black_pixel)
                    window.fill_rectangle(gc, 10, 10, 20, 20)
                    conn.sync()
                    return await paints.drawn(2.0)
                finally:
                    paints.close()

        assert asyncio.run(draw_while_watching())
        window.destroy()
        conn.sync()
    finally:
        conn.close()


def test_a_vanished_window_ends_the_watch_quietly(x: XSession) -> None:
    conn = display.Display(x.display)
    try:
        window = conn.screen().root.create_window(0, 0, 50, 50, 0, X.CopyFromParent)
        window.map()
        conn.sync()

        async def watch_then_destroy() -> bool:
            async with XConnection(x.display) as ours:
                paints = await X11Windows(ours).watch_paints(window.id)
                assert paints is not None
                window.destroy()
                conn.sync()
                result = await paints.drawn(0.3)
                paints.close()
                paints.close()  # twice: idempotent
                return result

        assert not asyncio.run(watch_then_destroy())
    finally:
        conn.close()

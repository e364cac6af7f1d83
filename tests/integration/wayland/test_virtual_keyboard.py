"""Our virtual keyboard against a display that never answers (the compositor-side checks
are in tests/e2e/test_wayland.py)."""

from __future__ import annotations

import asyncio
import socket
import threading
from contextlib import AsyncExitStack
from pathlib import Path

from anyfill.daemon.wayland.virtual_keyboard import (
    open_virtual_keyboard,
    virtual_keyboard_offered,
)


async def test_a_display_that_never_answers_is_given_up_and_leaves_no_thread_behind(
    tmp_path: Path,
) -> None:
    """Something listens where the compositor would be but never speaks Wayland: the
    route is refused (the daemon then tries wtype or a portal) and the worker thread is not
    left blocked in libwayland."""
    path = tmp_path / "wayland-silent"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        environ = {"WAYLAND_DISPLAY": str(path), "XDG_CURRENT_DESKTOP": "river"}
        async with AsyncExitStack() as stack:
            assert await open_virtual_keyboard(stack, environ) is None
        assert await virtual_keyboard_offered(environ) == (
            "the compositor did not list its globals (no answer)"
        )
    await asyncio.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith("anyfill-vkbd")]

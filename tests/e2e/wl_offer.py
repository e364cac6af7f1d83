"""A Wayland client that owns the clipboard and the primary selection with several formats
at once, the way a browser does after a copy (text, HTML, an image), and serves them until
another client takes each selection over.

It speaks wlr-data-control (the protocol sway 1.7 has) directly with pywayland, blocking,
one request at a time: nothing of the daemon's asyncio client is used.

    python -m tests.e2e.wl_offer FORMATS.json

FORMATS.json: ``{"clipboard": {"text/plain": "<hex>", ...}, "primary": {...}}``; a value
``{"size": N}`` is N bytes of "x" (a huge format), ``{"stall": true}`` a format whose pipe
is never written nor closed (an owner that hangs). Prints ``ready`` once the compositor made
it the owner of both; exits when both were taken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pywayland.client.display import Display
from pywayland.protocol.wayland import WlSeat

from anyfill.daemon.wayland.protocols.wlr_data_control_unstable_v1 import (
    ZwlrDataControlManagerV1,
)
from tests.e2e.harness import REPO, wait_until
from tests.e2e.wayland import WaylandSession


def start_owner(
    session: WaylandSession,
    clipboard: dict[str, bytes],
    primary: dict[str, bytes],
    *,
    huge: dict[str, int] | None = None,
    stalled: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """This client in its own process, once it owns both selections. ``huge``: more
    clipboard formats of that many bytes; ``stalled``: clipboard formats never written."""
    spec = session.workdir / "formats.json"
    extra: dict[str, object] = {mime: {"size": size} for mime, size in (huge or {}).items()}
    extra.update({mime: {"stall": True} for mime in stalled})
    spec.write_text(
        json.dumps(
            {
                "clipboard": {mime: data.hex() for mime, data in clipboard.items()} | extra,
                "primary": {mime: data.hex() for mime, data in primary.items()},
            }
        )
    )
    log = session.workdir / "wl_offer.log"
    log.write_bytes(b"")
    process = session.spawn([sys.executable, "-m", __name__, str(spec)], log.name, cwd=REPO)
    wait_until(lambda: b"ready\n" in log.read_bytes(), 10, f"the owner client ({log})")
    return process


def main(path: str) -> int:
    formats = {
        which: {mime: _data(value) for mime, value in types.items()}
        for which, types in json.loads(Path(path).read_text()).items()
    }
    display = Display(os.environ["WAYLAND_DISPLAY"])
    display.connect()
    found: dict[str, tuple[int, int]] = {}
    registry = display.get_registry()

    def on_global(_registry: Any, name: int, interface: str, version: int) -> None:
        found.setdefault(interface, (name, version))

    registry.dispatcher["global"] = on_global
    display.roundtrip()
    seat = registry.bind(found["wl_seat"][0], WlSeat, 1)
    manager = registry.bind(found[ZwlrDataControlManagerV1.name][0], ZwlrDataControlManagerV1, 2)
    device = manager.get_data_device(seat)
    live: dict[str, Any] = {}
    for which, types in formats.items():
        source = manager.create_data_source()
        for mime in types:
            source.offer(mime)
        source.dispatcher["send"] = _sender(types)
        source.dispatcher["cancelled"] = _canceller(live, which)
        live[which] = source
        if which == "clipboard":
            device.set_selection(source)
        else:
            device.set_primary_selection(source)
    display.roundtrip()
    print("ready", flush=True)
    while live:
        display.dispatch(block=True)
    display.disconnect()
    return 0


def _data(value: str | dict[str, Any]) -> bytes | None:
    if isinstance(value, str):
        return bytes.fromhex(value)
    return None if value.get("stall") else b"x" * int(value["size"])


_held: list[int] = []
"""Pipes of stalled formats: open, never written, until we exit."""


def _sender(types: dict[str, bytes | None]) -> Any:
    def on_send(_source: Any, mime: str, fd: int) -> None:
        data = types.get(mime, b"")
        if data is None:
            _held.append(fd)
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    return on_send


def _canceller(live: dict[str, Any], which: str) -> Any:
    def on_cancelled(source: Any) -> None:
        live.pop(which, None)
        source.destroy()

    return on_cancelled


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""doctor's list of the compositor's globals never hangs on a display that does not answer."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from anyfill.daemon.wayland.connection import PROBE_TIMEOUT_S, list_globals


def test_a_display_that_takes_the_connection_and_never_answers_gives_no_globals(
    tmp_path: Path,
) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "wayland-hung"))
    listener.listen(1)  # connections complete in the backlog; nothing is ever read
    try:
        started = time.monotonic()
        found = list_globals({"XDG_RUNTIME_DIR": str(tmp_path), "WAYLAND_DISPLAY": "wayland-hung"})
        waited = time.monotonic() - started
    finally:
        listener.close()
    assert found == {}
    # It gave up on its own bound, not because the peer closed: the probe waited it out.
    assert PROBE_TIMEOUT_S <= waited < PROBE_TIMEOUT_S + 5, waited

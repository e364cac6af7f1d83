"""The real daemon (``anyfill run --headless``) with the managed llama-server and the tiny
FIM GGUF: a hotkey press in the Qt target is answered by the server the daemon started, and
the server never outlives the daemon, whether it stops on SIGTERM or is killed."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, wait_until
from tests.llm.server import SERVER_BINARY, SKIP_REASON, TINY_FIM_MODEL, find_assets

ASSETS = find_assets()
pytestmark = [
    pytest.mark.desktop,
    pytest.mark.llamacpp,
    pytest.mark.skipif(ASSETS is None, reason=SKIP_REASON),
]

KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+j"
preview = "<ctrl>+<alt>+k"
cancel = "<ctrl>+<alt>+l"
"""


def managed_config() -> str:
    assert ASSETS is not None
    return f"""
[[backends]]
name = "managed"
type = "llamacpp-managed"
model = "{ASSETS / TINY_FIM_MODEL}"
max_tokens = 6
[backends.server]
binary = "{ASSETS / SERVER_BINARY}"
context_size = 1024

[routing]
default = ["managed"]

[logging]
level = "INFO"
file = false
{KEYS}
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _server_of(daemon: Daemon) -> int | None:
    """The llama-server the daemon started (a child of its process), once it is ready."""
    if "managed llama-server 'managed': ready" not in daemon.log():
        return None
    pid = daemon.process.pid
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"llama-server" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_daemon_answers_from_its_server_and_never_leaves_it_behind(
    sig: signal.Signals, x: XSession, qt: QtTarget
) -> None:
    daemon = Daemon(x, managed_config(), name=f"managed-{sig.name}")
    server = wait_until(lambda: _server_of(daemon), 30, "the managed llama-server")
    try:
        qt.set("def add(a, b):\n    return ", 26)
        x.focus(qt.wid)
        count = len(daemon.outcomes())
        x.key("ctrl+alt+j")
        outcome = daemon.wait_outcome(count + 1, within=20)
        assert outcome.status == "inserted", daemon.log()
        assert outcome.chars > 0
        text = qt.state()["text"]
        assert text.startswith("def add(a, b):\n    return ")
        assert len(text) > 26  # the tiny model's (gibberish) answer was pasted at the caret
    finally:
        code = daemon.stop(sig)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
    wait_until(lambda: not _alive(server), 10, "the llama-server to exit with the daemon")


def test_status_names_the_managed_server_where_it_listens(x: XSession) -> None:
    """`anyfill status` said nothing about the server anyfill runs itself."""
    daemon = Daemon(x, managed_config(), name="managed-status")
    try:
        server = wait_until(lambda: _server_of(daemon), 30, "the managed llama-server")
        code, out = daemon.cli("status")
        assert code == 0, out
        line = next(line for line in out.splitlines() if line.startswith("managed:"))
        assert line.startswith("managed:  managed ready at http://127.0.0.1:"), out
        assert f"pid {server}" in line
        assert TINY_FIM_MODEL in line
    finally:
        daemon.stop(signal.SIGTERM)


def test_saving_other_settings_keeps_the_running_server(x: XSession) -> None:
    """Saving any setting (the panel writes the file, the daemon reloads it) stopped the
    managed llama-server and loaded its model again; only a change of the server's own
    settings may."""
    daemon = Daemon(x, managed_config(), name="managed-reload")
    try:
        server = wait_until(lambda: _server_of(daemon), 30, "the managed llama-server")
        text = daemon.config_path.read_text()
        daemon.config_path.write_text(
            text.replace("max_tokens = 6", "max_tokens = 7").replace(
                'level = "INFO"', 'level = "INFO"\nmax_bytes = 2000000'
            )
        )
        wait_until(lambda: "settings reloaded from" in daemon.log(), 10, "the reload")
        assert _server_of(daemon) == server, daemon.log()
        assert _alive(server)
        assert daemon.log().count("managed llama-server 'managed': ready") == 1

        daemon.config_path.write_text(
            daemon.config_path.read_text().replace("context_size = 1024", "context_size = 2048")
        )
        wait_until(lambda: not _alive(server), 20, "the old server to stop")
        wait_until(
            lambda: daemon.log().count("managed llama-server 'managed': ready") == 2,
            30,
            "the server with the new context size",
        )
    finally:
        daemon.stop(signal.SIGTERM)

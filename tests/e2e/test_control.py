"""The control socket of a real ``anyfill run --headless`` under Xvfb: ``anyfill trigger``
completes in the Qt target exactly like the hotkey, ``anyfill status`` answers, a second
``anyfill run`` is refused (also when two start at once), a stale socket from a killed
daemon is replaced, and bad input never stops the daemon."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import stat
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import FIGURES
from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

USER_CLIP = "the user's clipboard, untouched by a control trigger ✓"
# Keys nobody else in the session grabs: these daemons run beside the session's one.
OWN_KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+j"
preview = "<ctrl>+<alt>+k"
cancel = "<ctrl>+<alt>+l"
"""


@pytest.fixture(scope="module")
def controlled(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    process = Daemon(x, daemon_config(llama[1].url, OWN_KEYS), name="controlled")
    yield process
    process.stop()


def prepare(x: XSession, qt: QtTarget, llama: LlamaCpp, reply: str) -> str:
    text = f"Hello world {time.monotonic()}"
    qt.set(text, 6)
    x.focus(qt.wid)
    x.set_clipboard(USER_CLIP)
    llama.queue.clear()
    llama.push(Reply(text=reply))
    return text


def test_trigger_completes_in_the_focused_app_like_the_hotkey(
    x: XSession, qt: QtTarget, controlled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare(x, qt, llama[0], "big ")
    count = len(controlled.outcomes())
    code, output = controlled.cli("trigger", "complete")
    assert (code, output) == (0, "")
    outcome = controlled.wait_outcome(count + 1)
    assert (outcome.status, outcome.app, outcome.method) == ("inserted", "anyfill-target", "paste")
    state = qt.state()
    assert state["text"] == text.replace("Hello ", "Hello big ")
    assert state["caret"] == len("Hello big ")
    assert state["selected"] == ""
    assert FIGURES["R1 user clipboard restored"].check(x.get_clipboard() == USER_CLIP)


def test_trigger_wait_prints_the_outcome_and_status_tells_it_without_text(
    x: XSession, qt: QtTarget, controlled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    prepare(x, qt, llama[0], "secret-middle ")
    code, output = controlled.cli("trigger", "preview", "--wait")
    assert code == 0, output
    assert output.startswith("inserted in anyfill-target (paste, capture keyboard, 14 chars, ")
    assert "secret-middle" in qt.state()["text"]

    code, output = controlled.cli("status", "--json")
    assert code == 0, output
    status = json.loads(output)
    assert status["pid"] == controlled.process.pid
    assert (status["state"], status["ui"], status["desktop"]) == ("idle", None, "x11")
    assert status["backends"] == ["stub"]
    assert status["hotkeys"]["complete"] == "<ctrl>+<alt>+j"
    assert status["last"]["action"] == "preview"
    assert status["last"]["status"] == "inserted"
    assert status["last"]["chars"] == len("secret-middle ")
    assert "secret-middle" not in output
    assert "Hello" not in output

    code, text = controlled.cli("status")
    assert code == 0, text
    assert text.startswith(f"anyfill 0.1.0 is running (pid {controlled.process.pid}, up ")
    assert "state:    idle" in text
    assert "backends: stub" in text
    assert "last:     preview inserted in anyfill-target (paste, capture keyboard, 14 chars" in text


def test_pause_ignores_triggers_and_hotkeys_until_resume(
    x: XSession, qt: QtTarget, controlled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare(x, qt, llama[0], "paused ")
    count = len(controlled.outcomes())
    assert controlled.cli("pause") == (0, "anyfill is paused\n")
    code, output = controlled.cli("trigger", "complete")
    assert code == 1
    assert "anyfill is paused" in output
    x.key("ctrl+alt+j")  # the real hotkey is held too
    wait_until(lambda: "the complete hotkey is ignored" in controlled.log(), 5, "the pause log")
    assert qt.state()["text"] == text
    assert len(controlled.outcomes()) == count
    assert controlled.cli("resume") == (0, "anyfill is resumed\n")
    code, output = controlled.cli("trigger", "complete", "--wait")
    assert code == 0, output
    assert qt.state()["text"] == text.replace("Hello ", "Hello paused ")


def test_bad_input_gets_answers_and_the_daemon_keeps_working(
    x: XSession, qt: QtTarget, controlled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    codes = []
    for data in (b"nonsense\n", b"\xff\n", b'{"cmd": "rm -rf"}\n', b"x" * 300_000, b"[]\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(controlled.socket_path))
            # The daemon stops reading at 64 KiB, answers and closes.
            with contextlib.suppress(BrokenPipeError):
                sock.sendall(data)
            codes.append(json.loads(sock.makefile("rb").readline())["error"]["code"])
    assert codes == ["bad-json", "bad-json", "unknown-command", "too-long", "bad-request"]
    # A client that connects and goes away without a word.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(controlled.socket_path))
    text = prepare(x, qt, llama[0], "still ")
    code, output = controlled.cli("trigger", "complete", "--wait")
    assert code == 0, output
    assert qt.state()["text"] == text.replace("Hello ", "Hello still ")
    assert "Traceback" not in controlled.log()


def test_doctor_names_the_running_daemon(controlled: Daemon) -> None:
    _, output = controlled.cli("--config", str(controlled.config_path), "doctor")
    daemon_line = next(line for line in output.splitlines() if line.split()[1:2] == ["daemon"])
    assert daemon_line.split(None, 2) == [
        "ok",
        "daemon",
        f"running (pid {controlled.process.pid}, headless); control socket "
        f"{controlled.socket_path}",
    ]


def test_socket_and_directory_are_private(controlled: Daemon) -> None:
    assert stat.S_IMODE(controlled.socket_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(controlled.socket_path.parent.stat().st_mode) == 0o700
    assert (controlled.socket_path.parent / "instance.lock").read_text().strip() == str(
        controlled.process.pid
    )


def test_a_second_run_is_refused_and_the_first_keeps_its_hotkeys(
    x: XSession, controlled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    second = Daemon(
        x,
        daemon_config(llama[1].url, OWN_KEYS),
        name="second",
        runtime_dir=controlled.runtime_dir,
        wait=False,
    )
    assert second.process.wait(30) == 1
    assert second.log().strip() == (
        f"anyfill: error: anyfill is already running (pid {controlled.process.pid}); use "
        "'anyfill status' to see it, 'anyfill trigger complete' to send it a hotkey, or stop "
        "it before starting another"
    )
    code, output = controlled.cli("status", "--json")
    assert code == 0
    assert json.loads(output)["pid"] == controlled.process.pid


def test_two_started_at_once_exactly_one_wins(
    x: XSession, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    runtime = x.workdir / "run-race"
    config = daemon_config(llama[1].url, OWN_KEYS.replace("+j", "+m").replace("+k", "+n"))
    config = config.replace("+l", "+p")
    racers = [
        Daemon(x, config, name=f"racer-{n}", runtime_dir=runtime, wait=False) for n in range(2)
    ]
    try:

        def settled() -> bool:
            alive = [r for r in racers if r.process.poll() is None]
            ready = [r for r in alive if "anyfill is running" in r.log()]
            return len(ready) == 1 and len(alive) == 1

        wait_until(settled, 30, "one racer running and the other gone")
        winner = next(r for r in racers if r.process.poll() is None)
        loser = next(r for r in racers if r is not winner)
        assert loser.process.returncode == 1
        assert f"anyfill is already running (pid {winner.process.pid})" in loser.log()
        assert "taken by another program" not in loser.log()  # refused before grabbing keys
        code, output = winner.cli("status", "--json")
        assert (code, json.loads(output)["pid"]) == (0, winner.process.pid)
    finally:
        for racer in racers:
            racer.stop()


def test_a_killed_daemons_stale_socket_is_replaced(
    x: XSession, qt: QtTarget, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    config = daemon_config(llama[1].url, OWN_KEYS.replace("+j", "+y"))
    crashed = Daemon(x, config, name="crashed")
    crashed.stop(signal.SIGKILL)
    assert crashed.socket_path.is_socket()  # left behind
    assert crashed.cli("status")[0] == 3  # nothing answers on it
    reborn = Daemon(x, config, name="reborn", runtime_dir=crashed.runtime_dir)
    try:
        text = prepare(x, qt, llama[0], "again ")
        code, output = reborn.cli("trigger", "complete", "--wait")
        assert code == 0, output
        assert qt.state()["text"] == text.replace("Hello ", "Hello again ")
        assert "replaced a stale control socket" in reborn.log()
    finally:
        assert reborn.stop() == 0
    assert not reborn.socket_path.exists()  # a clean stop removes it

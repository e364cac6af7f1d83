"""Settings take effect while anyfill runs: a running ``anyfill run`` process, its config
file edited on disk (atomically, like the panel and most editors, or in place).

- a new backend serves the next completion with no restart, while the completion already
  in flight finishes on the old one;
- a broken edit keeps the last good settings and names file:line: key: problem in the log;
- a changed hotkey works at once; a new combination another program holds keeps the old.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config, wait_until
from tests.e2e.test_qt_target import answer_next, infill, prepare_hello_world
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+q"
preview = "<ctrl>+<alt>+w"
cancel = "<ctrl>+<alt>+e"
"""
PRESS = "ctrl+alt+q"


def config_for(url: str, hotkeys: str = KEYS, max_tokens: int = 64) -> str:
    return daemon_config(url, hotkeys).replace(
        f'url = "{url}"', f'url = "{url}"\nmax_tokens = {max_tokens}'
    )


def save_atomically(path: Path, text: str) -> None:
    """What the settings panel and most editors do: a new file renamed over the old."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def reloads(daemon: Daemon) -> int:
    return daemon.log().count("settings reloaded from")


@pytest.fixture(scope="module")
def second() -> Iterator[tuple[LlamaCpp, LoopbackServer]]:
    responder = LlamaCpp(default=Reply(text="from the new backend"))
    with LoopbackServer.in_thread(responder) as server:
        yield responder, server


@pytest.fixture(scope="module")
def live(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    process = Daemon(x, config_for(llama[1].url), name="anyfill-live")
    yield process
    process.stop()


def press_and_wait_request(x: XSession, daemon: Daemon, server: LoopbackServer, keys: str) -> int:
    before = len(infill(server))
    count = len(daemon.outcomes())
    x.key(keys)
    wait_until(lambda: len(infill(server)) > before, 5, "the request")
    return count


def test_a_new_backend_serves_the_next_completion_and_the_running_one_finishes_on_the_old(
    x: XSession,
    qt: QtTarget,
    live: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    second: tuple[LlamaCpp, LoopbackServer],
) -> None:
    old, old_server = llama
    _, new_server = second
    pid = live.process.pid
    text = prepare_hello_world(x, qt)
    answer_next(old, Reply(text="slow old ", delay_s=1.5))
    count = press_and_wait_request(x, live, old_server, PRESS)
    reloaded = reloads(live)
    save_atomically(live.config_path, config_for(new_server.url))
    wait_until(lambda: reloads(live) > reloaded, 5, "the reload")
    # The reload happened while the request was still waiting for its answer.
    assert len(live.outcomes()) == count
    outcome = live.wait_outcome(count + 1)
    assert outcome.status == "inserted", outcome
    assert qt.state()["text"] == text.replace("Hello world", "Hello slow old world")

    requests_on_old = len(infill(old_server))
    text = prepare_hello_world(x, qt)
    count = press_and_wait_request(x, live, new_server, PRESS)
    assert live.wait_outcome(count + 1).status == "inserted"
    assert "from the new backend" in qt.state()["text"]
    assert len(infill(old_server)) == requests_on_old
    assert live.process.pid == pid
    assert live.process.poll() is None
    assert ": backends changed" in live.log()


def test_a_broken_edit_keeps_the_last_good_settings_and_names_the_line(
    x: XSession,
    qt: QtTarget,
    live: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    second: tuple[LlamaCpp, LoopbackServer],
) -> None:
    _, new_server = second
    asked_old = len(infill(llama[1]))
    good = config_for(new_server.url)
    changed, reloaded = live.config_path.read_text() != good, reloads(live)
    save_atomically(live.config_path, good)
    if changed:  # in force before the broken edit: it is "the last good settings" below
        wait_until(lambda: reloads(live) > reloaded, 5, "the reload")
    broken = config_for(new_server.url, max_tokens=-3)
    line = broken.splitlines().index("max_tokens = -3") + 1
    # An in-place edit, as an editor without backup files does it.
    live.config_path.write_text(broken)
    expected = f"{live.config_path}:{line}: backends[0].max_tokens: must be at least 1; found -3"
    wait_until(lambda: expected in live.log(), 5, "the error in the log")
    assert "the last good settings stay in force" in live.log()
    code, status = live.cli("status")
    assert code == 0
    assert f"config: {expected}" in status
    prepare_hello_world(x, qt)
    # The same text as the previous test's press: the answer may come from the completion
    # cache, which a reload of unchanged backends keeps, so no request is awaited here.
    count = len(live.outcomes())
    x.key(PRESS)
    assert live.wait_outcome(count + 1).status == "inserted"
    assert len(infill(llama[1])) == asked_old  # the last good settings: the new backend
    assert live.process.poll() is None
    # Fixed again: applied, and said so.
    save_atomically(live.config_path, good)
    wait_until(lambda: f"{live.config_path} is valid again" in live.log(), 5, "the recovery")
    assert f"config: {live.config_path}: in force" in live.cli("status")[1]


def test_a_changed_hotkey_works_at_once_and_a_taken_one_keeps_the_old(
    x: XSession,
    qt: QtTarget,
    live: Daemon,
    daemon: Daemon,
    second: tuple[LlamaCpp, LoopbackServer],
) -> None:
    _, new_server = second
    reloaded = reloads(live)
    save_atomically(
        live.config_path, config_for(new_server.url, KEYS.replace("<ctrl>+<alt>+q", "<alt>+r"))
    )
    wait_until(lambda: reloads(live) > reloaded, 5, "the reload")
    assert "hotkey <alt>+r: complete" in live.log()
    prepare_hello_world(x, qt)
    count = press_and_wait_request(x, live, new_server, "alt+r")
    assert live.wait_outcome(count + 1).status == "inserted"
    # The old combination is released: it now reaches the application, not anyfill.
    count = len(live.outcomes())
    x.key(PRESS)
    time.sleep(1.0)
    assert len(live.outcomes()) == count

    # The session's daemon holds <ctrl>+<alt>+<space>: the grab fails, <alt>+r stays.
    reloaded = reloads(live)
    taken = KEYS.replace("<ctrl>+<alt>+q", "<ctrl>+<alt>+<space>")
    save_atomically(live.config_path, config_for(new_server.url, taken))
    wait_until(lambda: reloads(live) > reloaded, 5, "the reload")
    assert (
        "hotkey <ctrl>+<alt>+<space> (complete) is taken by another program; keeping <alt>+r"
        in live.log()
    )
    prepare_hello_world(x, qt)
    count = press_and_wait_request(x, live, new_server, "alt+r")
    assert live.wait_outcome(count + 1).status == "inserted"


def test_the_log_level_changes_at_once(
    x: XSession, qt: QtTarget, live: Daemon, second: tuple[LlamaCpp, LoopbackServer]
) -> None:
    _, new_server = second
    reloaded = reloads(live)
    debug = config_for(new_server.url).replace('level = "INFO"', 'level = "DEBUG"')
    save_atomically(live.config_path, debug)
    wait_until(lambda: reloads(live) > reloaded, 5, "the reload")
    assert "anyfill: DEBUG:" not in live.log()
    prepare_hello_world(x, qt)
    count = press_and_wait_request(x, live, new_server, PRESS)
    assert live.wait_outcome(count + 1).status == "inserted"
    assert "anyfill: DEBUG: hotkey: complete" in live.log()

"""Live reload against files a user (or another program) may leave at the config path, on a
running ``anyfill run`` (issue 24): a FIFO, a link to ``/dev/zero``, a 100 MB file, an
in-place save in steps, a file that cannot be read, a key pasted into the wrong field.

Each costs a line in the log and in ``anyfill status``; the daemon keeps answering, stops on
SIGTERM, and the next good file is applied.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Daemon, XSession, daemon_config, wait_until
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp

pytestmark = pytest.mark.desktop


# Keys of its own: the session daemon (tests/e2e/conftest.py) may hold the default ones.
KEYS = """
[hotkeys]
complete = "<ctrl>+<alt>+h"
preview = "<ctrl>+<alt>+g"
cancel = "<ctrl>+<alt>+f"
"""


def config_for(url: str, max_tokens: int = 64) -> str:
    return daemon_config(url, KEYS).replace(
        f'url = "{url}"', f'url = "{url}"\nmax_tokens = {max_tokens}'
    )


def save_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def reloads(daemon: Daemon) -> int:
    return daemon.log().count("settings reloaded from")


def status_config(daemon: Daemon) -> str:
    """The ``config:`` line of ``anyfill status``, which must answer within a few seconds."""
    code, out = daemon.cli("status", timeout=15)
    assert code == 0, out
    (line,) = [line for line in out.splitlines() if line.startswith("config:")]
    return " ".join(line.split())  # the columns' padding is not what is tested


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def fresh(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    daemon = Daemon(x, config_for(llama[1].url), name=f"anyfill-hostile-{time.monotonic_ns()}")
    yield daemon
    daemon.stop()


def test_a_fifo_at_the_config_path_costs_an_error_line_not_the_daemon(
    fresh: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    path = fresh.config_path
    path.unlink()
    os.mkfifo(path)
    wait_until(lambda: "not a regular file" in fresh.log(), 10, "the FIFO refused")
    line = status_config(fresh)
    assert "cannot read the file: not a regular file" in line
    assert "in force" not in line.split(";")[0]
    # A good file in its place is applied: the watcher is not stuck on the FIFO.
    reloaded = reloads(fresh)
    path.unlink()
    save_atomically(path, config_for(llama[1].url, max_tokens=32))
    wait_until(lambda: reloads(fresh) > reloaded, 10, "the good file applied")
    assert status_config(fresh) == f"config: {path}: in force"
    assert fresh.stop() == 0


def test_dev_zero_and_a_100_mb_file_are_refused_and_sigterm_still_stops_it(
    fresh: Daemon,
) -> None:
    path = fresh.config_path
    before = rss_mib(fresh.process.pid)
    path.unlink()
    path.symlink_to("/dev/zero")
    wait_until(lambda: "not a regular file" in fresh.log(), 10, "/dev/zero refused")
    assert rss_mib(fresh.process.pid) < before + 50
    path.unlink()
    with path.open("w") as handle:  # 100 MB of comments: valid TOML, were it read
        line = "# " + "x" * 1021 + "\n"
        for _ in range(100 * 1024):
            handle.write(line)
    wait_until(lambda: "MiB; a settings file is at most 1 MiB" in fresh.log(), 10, "refused")
    assert "MiB; a settings file is at most 1 MiB" in status_config(fresh)
    assert rss_mib(fresh.process.pid) < before + 50
    started = time.monotonic()
    assert fresh.stop() == 0  # raises after 10 s
    assert time.monotonic() - started < 10


def test_a_save_that_truncates_and_then_writes_in_steps_is_applied_once(
    fresh: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    path = fresh.config_path
    new = config_for(llama[1].url, max_tokens=32)
    cut = new.index("[routing]")  # the first part parses on its own: routing falls back
    reloaded = reloads(fresh)
    with path.open("r+") as handle:
        # Pauses longer than the old watcher's 0.25 s + 0.25 s check, shorter than SETTLE_S.
        handle.truncate(0)
        handle.flush()
        time.sleep(0.7)
        handle.write(new[:cut])
        handle.flush()
        time.sleep(0.7)
        handle.write(new[cut:])
    wait_until(lambda: reloads(fresh) > reloaded, 10, "the save applied")
    time.sleep(2)  # time for a second, wrong application to show
    assert reloads(fresh) == reloaded + 1, fresh.log()
    assert "routing changed" not in fresh.log()
    assert "managed" not in fresh.log().split("anyfill is running", 1)[1]


def test_status_names_a_file_it_cannot_read_and_never_echoes_a_pasted_key(
    fresh: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    path = fresh.config_path
    key = "sk-proj-" + "Q7" * 12
    save_atomically(
        path, config_for(llama[1].url).replace("max_tokens = 64", f'max_tokens = "{key}"')
    )
    wait_until(lambda: "backends[0].max_tokens" in status_config(fresh), 10, "the rejection")
    assert key not in status_config(fresh)
    assert key not in fresh.log()

    path.write_bytes(b'[logging]\nlevel = "\xff"\n')
    wait_until(lambda: "not UTF-8" in status_config(fresh), 10, "invalid UTF-8 named")
    path.unlink()
    wait_until(lambda: "removed" in status_config(fresh), 10, "the removal named")
    assert "in force" not in status_config(fresh).split(";")[0]
    path.mkdir()
    wait_until(lambda: "not a regular file" in status_config(fresh), 10, "a directory named")
    path.rmdir()
    save_atomically(path, config_for(llama[1].url, max_tokens=48))
    wait_until(lambda: status_config(fresh) == f"config: {path}: in force", 10, "in force again")

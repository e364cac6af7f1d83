"""``anyfill doctor``'s verdict and exit code in the situations a user meets: nothing
running, a backend running on a real X display, a broken configuration, no tray host, a
real XEmbed tray host, an accessibility bus, and ``--json`` agreeing with the text."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import MISSING, XSession, wait_until
from tests.servers import RecordedRequest, Response
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import SEED_ANSWER, Reply

BUS_LAUNCHER = Path("/usr/libexec/at-spi-bus-launcher")


NULL_KEYRING = "keyring.backends.null.Keyring"


def doctor(
    config: Path,
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    keyring: str = NULL_KEYRING,
) -> subprocess.CompletedProcess[str]:
    base = env if env is not None else dict(os.environ)
    full = {
        key: value
        for key, value in base.items()
        if not key.startswith("ANYFILL_") and key != "WAYLAND_DISPLAY"
    }
    if env is None:
        full.pop("DISPLAY", None)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    full.update(
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_RUNTIME_DIR=str(runtime),
        XDG_SESSION_TYPE="x11",
        PYTHON_KEYRING_BACKEND=keyring,
    )
    return subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.launcher", "--config", str(config), "doctor", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        check=False,
    )


def report(
    config: Path, tmp_path: Path, env: dict[str, str] | None = None, keyring: str = NULL_KEYRING
) -> dict[str, Any]:
    result = doctor(config, tmp_path, "--json", env=env, keyring=keyring)
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["exit_code"] == result.returncode
    data["by_topic"] = {f["topic"]: (f["status"], f["detail"]) for f in data["findings"]}
    return data


def write_config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "{url}"\n'
        '[routing]\ndefault = ["local"]\n'
    )
    return path


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer.in_thread(LlamaCpp()) as running:
        yield running


def test_nothing_running_cannot_work(tmp_path: Path, refused_url: str) -> None:
    config = write_config(tmp_path, refused_url)
    data = report(config, tmp_path)
    assert data["can_work"] is False
    assert data["exit_code"] == 1
    assert data["by_topic"]["backend local"][0] == "fail"
    assert data["by_topic"]["session"][0] == "fail"
    text = doctor(config, tmp_path)
    assert text.returncode == 1
    assert text.stdout.splitlines()[-1].startswith("fail verdict")


class FailingHealth:
    """A llama-server whose /health fails with words of the user's (a path, a prompt)."""

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        body = {"error": {"code": 500, "message": SERVER_WORDS, "type": "server_error"}}
        await response.json(500, body)


SERVER_WORDS = "cannot read /home/alice/diary-2026.txt"


def test_a_server_s_error_text_shows_in_doctor_only_on_opt_in(tmp_path: Path) -> None:
    with LoopbackServer.in_thread(FailingHealth()) as running:
        config = write_config(tmp_path, running.url)
        hidden = doctor(config, tmp_path)
        as_json = doctor(config, tmp_path, "--json")
        config.write_text(config.read_text() + "[privacy]\nlog_text = true\n")
        shown = doctor(config, tmp_path)
    for out in (hidden.stdout, as_json.stdout):
        assert "backend 'local' failed with HTTP 500" in out
        assert "error code: 'server_error'" in out
        assert "diary" not in out
        assert f"{len(SERVER_WORDS)} characters, is hidden" in out
    assert f"server said: {SERVER_WORDS}" in shown.stdout


def test_a_loading_llama_server_is_named_in_doctor(tmp_path: Path) -> None:
    with LoopbackServer.in_thread(LlamaCpp(loading=True)) as running:
        result = doctor(write_config(tmp_path, running.url), tmp_path)
    assert "backend 'local' is still loading its model (HTTP 503)" in result.stdout


def test_a_broken_config_says_where_and_still_checks_the_desktop(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = 12\n')
    data = report(config, tmp_path)
    assert data["exit_code"] == 2
    assert data["can_work"] is False
    status, detail = data["by_topic"]["config"]
    assert status == "fail"
    assert f"invalid: {config}:4: backends[0].url" in detail  # the line and key
    assert "url" in detail
    assert {"keyring", "session", "tray", "autostart", "daemon"} <= set(data["by_topic"])
    text = doctor(config, tmp_path)
    assert text.returncode == 2
    assert "fix the configuration first" in text.stdout


@pytest.mark.desktop
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")
def test_a_running_backend_on_a_real_display_can_work_without_a_tray_host(
    tmp_path: Path, server: LoopbackServer
) -> None:
    config = write_config(tmp_path, server.url)
    with XSession.start() as session:
        data = report(config, tmp_path, env=session.env)
    by_topic = data["by_topic"]
    assert by_topic["backend local"][0] == "ok"
    assert by_topic["desktop"] == ("ok", f"X display {session.display} with XTEST")
    assert by_topic["session"][0] == "ok"
    assert by_topic["clipboard"][0] == "ok"
    status, detail = by_topic["tray"]
    assert status == "warn"
    assert "no system tray host" in detail
    assert "AppIndicator" in detail  # the fix
    assert data["can_work"] is True
    assert data["exit_code"] == 0


@pytest.mark.desktop
@pytest.mark.skipif(
    bool(MISSING) or shutil.which("trayer") is None, reason="needs Xvfb and trayer (apt)"
)
def test_an_xembed_tray_host_is_found(tmp_path: Path, server: LoopbackServer) -> None:
    config = write_config(tmp_path, server.url)
    with XSession.start() as session:
        tray = session.spawn(["trayer", "--edge", "top", "--widthtype", "pixel"], "trayer.log")
        try:
            wait_until(
                lambda: report(config, tmp_path, env=session.env)["by_topic"]["tray"][0] == "ok",
                15,
                "trayer to own the tray selection",
            )
            status, detail = report(config, tmp_path, env=session.env)["by_topic"]["tray"]
        finally:
            os.killpg(tray.pid, signal.SIGTERM)
            tray.wait(10)
    assert status == "ok"
    assert f"XEmbed system tray on {session.display}" in detail


@contextlib.contextmanager
def session_bus(env: dict[str, str]) -> Iterator[str]:
    started = subprocess.run(
        ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    address, pid = started.stdout.split()[:2]
    try:
        yield address
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)


@pytest.mark.desktop
@pytest.mark.skipif(
    bool(MISSING) or not BUS_LAUNCHER.exists() or shutil.which("dbus-daemon") is None,
    reason="needs Xvfb, dbus-daemon and at-spi2-core",
)
def test_the_accessibility_bus(tmp_path: Path, server: LoopbackServer) -> None:
    config = write_config(tmp_path, server.url)
    with XSession.start() as session, session_bus(session.env) as address:
        env = {**session.env, "DBUS_SESSION_BUS_ADDRESS": address}
        status, detail = report(config, tmp_path, env=env)["by_topic"]["accessibility bus"]
        assert status == "warn"
        assert "no accessibility bus" in detail
        # Asked again: the first doctor did not make D-Bus activate the bus.
        again = report(config, tmp_path, env=env)["by_topic"]["accessibility bus"]
        assert again[0] == "warn", again
        launcher = session.spawn([str(BUS_LAUNCHER), "--launch-immediately"], "a11y.log", env)
        try:

            def a11y_line() -> tuple[str, str] | None:
                line = report(config, tmp_path, env=env)["by_topic"]["accessibility bus"]
                return line if "no accessibility bus" not in line[1] else None

            status, detail = wait_until(a11y_line, 15, "the accessibility bus")
            assert status == "warn"
            assert "accessibility is off (org.a11y.Status.IsEnabled)" in detail
            set_a11y_enabled(address)
            status, detail = report(config, tmp_path, env=env)["by_topic"]["accessibility bus"]
        finally:
            os.killpg(launcher.pid, signal.SIGTERM)
            launcher.wait(10)
    assert status == "ok", detail
    assert detail.startswith("unix:")


def set_a11y_enabled(address: str) -> None:
    """What a screen reader setting does: org.a11y.Status.IsEnabled = true."""
    from jeepney import DBusAddress, Properties
    from jeepney.io.blocking import open_dbus_connection

    status = DBusAddress("/org/a11y/bus", bus_name="org.a11y.Bus", interface="org.a11y.Status")
    with open_dbus_connection(address) as bus:
        bus.send_and_get_reply(Properties(status).set("IsEnabled", "b", True), timeout=5)


class StatusNotifierWatcher:
    """A minimal org.kde.StatusNotifierWatcher on a private bus, as KDE's or GNOME's
    AppIndicator extension runs it: it owns the name and says whether a host registered."""

    def __init__(self, address: str, host: bool) -> None:
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        self.bus = open_dbus_connection(address)
        self.host = host
        request = message_bus.RequestName("org.kde.StatusNotifierWatcher")
        self.bus.send_and_get_reply(request, timeout=5)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        from jeepney import HeaderFields, MessageType, new_error, new_method_return

        while True:
            try:
                message = self.bus.receive(timeout=10)
            except (OSError, TimeoutError, ValueError):
                return
            header = message.header
            if header.message_type != MessageType.method_call:
                continue
            member = header.fields.get(HeaderFields.member)
            if member == "Get" and message.body[1] == "IsStatusNotifierHostRegistered":
                self.bus.send(new_method_return(message, "v", (("b", self.host),)))
            else:
                self.bus.send(new_error(message, "org.freedesktop.DBus.Error.UnknownMethod"))

    def close(self) -> None:
        self.bus.close()


@pytest.mark.skipif(shutil.which("dbus-daemon") is None, reason="needs dbus-daemon")
@pytest.mark.parametrize("host", [True, False], ids=["host", "watcher-only"])
def test_a_status_notifier_host_is_found_on_the_session_bus(
    tmp_path: Path, refused_url: str, host: bool
) -> None:
    config = write_config(tmp_path, refused_url)
    base = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    with session_bus(base) as address:
        watcher = StatusNotifierWatcher(address, host)
        try:
            env = {**base, "DBUS_SESSION_BUS_ADDRESS": address}
            status, detail = report(config, tmp_path, env=env)["by_topic"]["tray"]
        finally:
            watcher.close()
    if host:
        assert (status, detail) == ("ok", "StatusNotifierItem host (org.kde.StatusNotifierWatcher)")
    else:  # a watcher with no host shows no icon (Qt agrees)
        assert status == "warn"
        assert "no system tray host" in detail


def test_a_keyring_that_cannot_be_reached_is_a_warning_not_a_crash(
    tmp_path: Path, refused_url: str
) -> None:
    config = write_config(tmp_path, refused_url)
    env = {**os.environ, "DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp_path / 'no-bus'}"}
    env.pop("DISPLAY", None)
    data = report(config, tmp_path, env=env, keyring="keyring.backends.SecretService.Keyring")
    status, detail = data["by_topic"]["keyring"]
    assert status == "warn"
    assert "environment variables" in detail


@pytest.mark.desktop
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")
def test_a_server_that_refuses_only_the_test_infill_is_a_warning(tmp_path: Path) -> None:
    """Issue #25: a backend that rejects doctor's own probe while real completions work is
    no "anyfill cannot work": doctor says what it tried and what failed, and warns."""
    refusing = LlamaCpp(Reply(error="bad_request", message="the probe is not welcome"))
    with LoopbackServer.in_thread(refusing) as running, XSession.start() as session:
        config = write_config(tmp_path, running.url)
        data = report(config, tmp_path, env=session.env)
        document = tmp_path / "doc.py"
        document.write_text("def area(r):\n    return <|cursor|>\n")
        complete = ["complete", str(document), "--backend", "local"]
        completed = subprocess.run(
            [sys.executable, "-m", "anyfill.daemon.launcher", "--config", str(config), *complete],
            capture_output=True,
            text=True,
            env={**os.environ, "HOME": str(tmp_path)},
            timeout=60,
            check=False,
        )
    status, detail = data["by_topic"]["backend local"]
    assert status == "warn", detail
    assert f"llamacpp at {running.url} answers /health (" in detail
    assert "doctor's test infill (4 tokens between 'def add(a, b):\\n    return ' and" in detail
    assert (
        "failed: backend 'local' rejected the request (server's error code: "
        "'invalid_request_error'" in detail
    )
    assert "try 'anyfill complete FILE --backend local'" in detail
    assert data["can_work"] is True, data["verdict"]
    assert data["exit_code"] == 0
    # A real completion on the same server works.
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == SEED_ANSWER

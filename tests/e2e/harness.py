"""Plays the user and the desktop for the end-to-end tests: a private Xvfb, target apps,
xdotool key presses, xclip as "another program" holding the clipboard, and anyfill as its
own process against a loopback llama.cpp responder.

Every child process writes to files, never pipes: xclip's background owner inherits
descriptors and would keep a pipe open forever.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("Xvfb", "xdotool", "xclip")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
SKIP_REASON = f"desktop tests need {', '.join(MISSING)} (Debian: .ci/apt-packages.txt)"
HOTKEY = "ctrl+alt+space"
CANCEL_HOTKEY = "ctrl+alt+BackSpace"


def wait_until(check: Callable[[], T], within: float = 5.0, what: str = "condition") -> T:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclass
class XSession:
    """A private Xvfb; ``env`` is the environment for processes that use it."""

    display: str
    process: subprocess.Popen[bytes]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    @contextlib.contextmanager
    def start(cls) -> Iterator[XSession]:
        workdir = Path(tempfile.mkdtemp(prefix="anyfill-e2e-"))
        read_fd, write_fd = os.pipe()
        # -noreset: when its last running client leaves, Xvfb resets and drops every
        # connection still in its setup; a program starting while a test's xdotool poll
        # exits then fails with "could not connect" (8 of 150 starts here). A desktop's
        # X server never resets mid-session: its window manager stays connected.
        command = ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "1280x800x24", "-noreset"]
        with (workdir / "xvfb.log").open("wb") as log:
            process = subprocess.Popen(
                [*command, "-nolisten", "tcp"],
                pass_fds=(write_fd,),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        os.close(write_fd)
        number = b""
        with os.fdopen(read_fd, "rb") as reader:
            while not number.endswith(b"\n"):
                chunk = reader.read(1)
                if not chunk:
                    raise RuntimeError("Xvfb did not start: see " + str(workdir / "xvfb.log"))
                number += chunk
        env = dict(os.environ)
        env.update(
            DISPLAY=f":{number.decode().strip()}",
            HOME=str(workdir),
            XDG_CONFIG_HOME=str(workdir / "config"),
            XDG_STATE_HOME=str(workdir / "state"),
            XDG_CACHE_HOME=str(workdir / "cache"),
            XDG_RUNTIME_DIR=str(workdir / "run"),
            QT_QPA_PLATFORM="xcb",
            NO_AT_BRIDGE="1",
            GSETTINGS_BACKEND="memory",
            # No session bus unless a test starts one: D-Bus clients must not autolaunch
            # daemons that outlive the test run.
            DBUS_SESSION_BUS_ADDRESS=f"unix:path={workdir / 'no-session-bus'}",
        )
        env.pop("WAYLAND_DISPLAY", None)
        (workdir / "run").mkdir(mode=0o700)
        session = cls(env["DISPLAY"], process, workdir, env)
        try:
            yield session
        finally:
            process.terminate()
            process.wait(10)
            shutil.rmtree(workdir, ignore_errors=True)

    def run(self, *args: str, timeout: float = 10, check: bool = True) -> str:
        returncode, text = self._output(args, "cmd.out", subprocess.STDOUT, timeout)
        if check and returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({returncode}): {text}")
        return text

    def _output(
        self, args: Sequence[str], out_name: str, stderr: int, timeout: float
    ) -> tuple[int, str]:
        """Run ``args`` in the session; its exit status and what it printed (via a file)."""
        out = self.workdir / out_name
        with out.open("wb") as stdout:
            result = subprocess.run(
                args, check=False, env=self.env, stdout=stdout, stderr=stderr, timeout=timeout
            )
        return result.returncode, out.read_text(errors="replace")

    def spawn(
        self,
        args: list[str],
        log_name: str,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> subprocess.Popen[bytes]:
        with (self.workdir / log_name).open("ab") as log:
            return subprocess.Popen(
                args,
                env=env if env is not None else self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )

    # -- playing the user ----------------------------------------------------------------

    def key(self, *keys: str, clear: bool = True) -> None:
        """Real key events through XTEST, as a keyboard would send them.

        ``clear``: xdotool lifts held modifiers first (and taps Caps Lock off and on).
        """
        flags = ["--clearmodifiers"] if clear else []
        self.run("xdotool", "key", *flags, "--delay", "0", *keys)

    def focus(self, wid: int, *, exact: bool = True) -> None:
        self.run("xdotool", "windowfocus", "--sync", str(wid))
        if exact:
            wait_until(lambda: self.focused() == wid, 3, f"focus on {wid:#x}")

    def find_window(self, wm_class: str, within: float = 20) -> int:
        """The first visible window of that class (GTK also has an unmapped leader)."""

        def search() -> int:
            out = self.run("xdotool", "search", "--onlyvisible", "--class", wm_class, check=False)
            # stderr is merged: an X error about a window going away may come first, and
            # its lines hold numbers too ("Resource id in failed request:  0x3", "opcode: 42"):
            # only a line that is a number alone is a window id.
            ids = [line.strip() for line in out.splitlines() if line.strip().isdigit()]
            return int(ids[0]) if ids else 0

        return wait_until(search, within, f"a {wm_class} window")

    def focused(self) -> int:
        return int(self.run("xdotool", "getwindowfocus").strip() or 0)

    def set_clipboard(self, text: str, selection: str = "clipboard") -> None:
        """Another program (xclip) owns the selection, like a user's copy elsewhere."""
        path = self.workdir / "clip.in"
        path.write_text(text)
        with path.open("rb") as stdin:
            subprocess.run(
                ["xclip", "-selection", selection, "-i"],
                stdin=stdin,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=5,
                check=True,
            )
        wait_until(lambda: self.get_clipboard(selection) == text, 3, "xclip to own the selection")

    def get_clipboard(self, selection: str = "clipboard", target: str | None = None) -> str | None:
        args = ["xclip", "-selection", selection, "-o"]
        if target:
            args += ["-t", target]
        try:
            returncode, text = self._output(args, "clip.out", subprocess.DEVNULL, 5)
        except subprocess.TimeoutExpired:
            return None
        return text if returncode == 0 else None


class QtTarget:
    """Our PySide6 target process and its JSON control socket."""

    def __init__(
        self,
        session: XSession,
        name: str = "anyfill-target",
        *,
        password: bool = False,
        fields: bool = False,
    ) -> None:
        self.session = session
        self.path = str(session.workdir / f"{name}.sock")
        flags = (["--password"] if password else []) + (["--fields"] if fields else [])
        self.process = session.spawn(
            [sys.executable, "-m", "tests.e2e.target_app", self.path, name, *flags],
            f"{name}.log",
            cwd=str(REPO),
        )
        self.sock = wait_until(self._connect, 20, "the Qt target to start")
        self.reader = self.sock.makefile("rb")
        self.wid = int(self._recv()["wid"])

    def _connect(self) -> socket.socket | None:
        if self.process.poll() is not None:
            raise RuntimeError("the Qt target exited; see its log")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            return None
        return sock

    def _recv(self) -> dict[str, Any]:
        line = self.reader.readline()
        if not line:
            raise RuntimeError("the Qt target closed its socket")
        return dict(json.loads(line))

    def call(self, **request: Any) -> dict[str, Any]:
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        return self._recv()

    def set(self, text: str, caret: int) -> None:
        self.call(cmd="set", text=text, caret=caret)

    def state(self) -> dict[str, Any]:
        return self.call(cmd="state")

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.call(cmd="quit")
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        self.reader.close()
        self.sock.close()


OUTCOME = re.compile(
    r"outcome=(\w+) app=(\S+) method=(\S+) capture=(\S+) ms=([\d.]+) chars=(\d+)"
    r"(?: reason=(.*))?"
)


@dataclass(frozen=True)
class Outcome:
    status: str
    app: str
    method: str
    capture: str
    ms: float
    chars: int
    reason: str


class Daemon:
    """``anyfill run --headless`` (or, ``headless=False``, ``anyfill run`` with the tray) as
    its own process; outcomes are read from its log.

    Each daemon gets its own ``XDG_RUNTIME_DIR`` (its control socket and instance lock), as
    if it ran for another user session, unless ``runtime_dir`` names a shared one.
    """

    def __init__(
        self,
        session: XSession,
        config: str,
        name: str = "anyfill",
        *,
        runtime_dir: Path | None = None,
        wait: bool = True,
        headless: bool = True,
    ) -> None:
        self.session = session
        self.config_path = session.workdir / f"{name}.toml"
        self.config_path.write_text(config)
        self.log_path = session.workdir / f"{name}.out"
        self.log_path.write_bytes(b"")
        self.runtime_dir = runtime_dir or session.workdir / f"run-{name}"
        self.runtime_dir.mkdir(mode=0o700, exist_ok=True)
        self.env = {**session.env, "XDG_RUNTIME_DIR": str(self.runtime_dir)}
        self.process = session.spawn(
            [
                sys.executable,
                "-m",
                "anyfill.daemon.cli",
                "--config",
                str(self.config_path),
                "run",
                *(["--headless"] if headless else []),
            ],
            self.log_path.name,
            env=self.env,
        )
        self.ready_marker = "anyfill is running" if headless else "tray ready"
        if wait:
            self.wait_running()

    def wait_running(self) -> None:
        wait_until(lambda: self._check_alive() and self.ready_marker in self.log(), 20, "anyfill")

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / "anyfill" / "control.sock"

    def cli(self, *args: str, timeout: float = 30) -> tuple[int, str]:
        """Run ``anyfill ARGS`` as the user would (the installed entry point's code) against
        this daemon; its exit status and output (stdout and stderr)."""
        out = self.session.workdir / f"cli-{os.getpid()}.out"
        with out.open("wb") as stdout:
            result = subprocess.run(
                [sys.executable, "-m", "anyfill.daemon.launcher", *args],
                check=False,
                env=self.env,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        return result.returncode, out.read_text(errors="replace")

    def _check_alive(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"anyfill exited with {self.process.returncode}:\n{self.log()}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def outcomes(self) -> list[Outcome]:
        return [
            Outcome(m[1], m[2], m[3], m[4], float(m[5]), int(m[6]), m[7] or "")
            for m in OUTCOME.finditer(self.log())
        ]

    def wait_outcome(self, count: int, within: float = 10) -> Outcome:
        wait_until(
            lambda: self._check_alive() and len(self.outcomes()) >= count,
            within,
            f"outcome #{count} in the anyfill log",
        )
        return self.outcomes()[count - 1]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
            raise


def daemon_config(backend_url: str, extra: str = "") -> str:
    return f"""
[[backends]]
name = "stub"
type = "llamacpp"
url = "{backend_url}"

[routing]
default = ["stub"]

[logging]
level = "INFO"
file = false
{extra}
"""

"""A real Wayland session for the end-to-end tests: sway headless in a user namespace, a
private session bus (AT-SPI is activated on it), an idle virtual keyboard, and helpers to
drive native Wayland applications.

sway refuses to run as root, so it runs in a user namespace mapped to uid 1000. Services
activated for the session (the AT-SPI bus, dconf) and wl-copy servers are found by the
session's unique runtime directory in /proc/PID/environ and stopped by pid; the test
process is a child subreaper so that those orphans come back to us and are reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.harness import XSession, wait_until

TOOLS = ("sway", "swaymsg", "wl-copy", "wl-paste", "wtype", "dbus-daemon", "unshare", "gdbus")
MISSING = [tool for tool in TOOLS if shutil.which(tool) is None]
SKIP_REASON = f"Wayland tests need {', '.join(MISSING)} (Debian: .ci/apt-packages.txt)"
PR_SET_CHILD_SUBREAPER = 36


def _usable() -> str:
    """Why sway cannot start here ('' when it can): user namespaces may be off."""
    if MISSING:
        return SKIP_REASON
    probe = subprocess.run(
        ["unshare", "--user", "--map-user=1000", "--map-group=1000", "true"],
        check=False,
        capture_output=True,
    )
    return "" if probe.returncode == 0 else "user namespaces are not available (sway as root)"


UNUSABLE = _usable()


@dataclass
class WaylandSession:
    workdir: Path
    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def start(cls, bindings: str = "") -> Iterator[WaylandSession]:
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        workdir = Path(tempfile.mkdtemp(prefix="anyfill-wl-"))
        run_dir = workdir / "run"
        run_dir.mkdir(mode=0o700)
        session = cls(workdir, run_dir)
        try:
            session._boot(bindings)
            yield session
        finally:
            session._stop()
            shutil.rmtree(workdir, ignore_errors=True)

    def _session_bus(self, env: dict[str, str]) -> str:
        """A private session bus (kept in :attr:`processes`) started with ``env``; its
        address."""
        read_fd, write_fd = os.pipe()
        self.processes.append(
            subprocess.Popen(
                ["dbus-daemon", "--session", "--nofork", f"--print-address={write_fd}"],
                pass_fds=(write_fd,),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as reader:
            return reader.readline().decode().strip()

    def _boot(self, bindings: str) -> None:
        config = self.workdir / "sway.conf"
        config.write_text(
            "output HEADLESS-1 resolution 1280x800\nxwayland disable\ndefault_border none\n"
            + bindings
        )
        base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        base.update(
            HOME=str(self.workdir),
            XDG_RUNTIME_DIR=str(self.run_dir),
            XDG_CONFIG_HOME=str(self.workdir / "config"),
            XDG_STATE_HOME=str(self.workdir / "state"),
            XDG_CACHE_HOME=str(self.workdir / "cache"),
            GSETTINGS_BACKEND="memory",
        )
        base.pop("NO_AT_BRIDGE", None)
        base.pop("DBUS_SESSION_BUS_ADDRESS", None)
        # The UI tests' QT_QPA_PLATFORM=offscreen (set in this process) would let services the
        # bus activates start a Qt portal backend (xdg-desktop-portal-kde) off-screen: a
        # GlobalShortcuts portal would then appear in a long run and not in a short one.
        base.pop("QT_QPA_PLATFORM", None)
        # And no portal backends at all, as on a sway desktop: xdg-desktop-portal 1.16 falls
        # back to any installed backend (KDE's, for tests/e2e/test_kde.py) otherwise.
        (self.workdir / "portals").mkdir()
        base["XDG_DESKTOP_PORTAL_DIR"] = str(self.workdir / "portals")
        address = self._session_bus(base)
        sway_env = {
            **base,
            "WLR_BACKENDS": "headless",
            "WLR_LIBINPUT_NO_DEVICES": "1",
            "WLR_RENDERER": "pixman",
            "DBUS_SESSION_BUS_ADDRESS": address,
        }
        self.spawn(
            ["unshare", "--user", "--map-user=1000", "--map-group=1000", "sway", "-c", str(config)],
            "sway.log",
            env=sway_env,
        )
        display = wait_until(self._display_name, 20, "sway to start")
        swaysock = wait_until(self._sway_socket, 10, "the sway IPC socket")
        self.env = {
            **base,
            "DBUS_SESSION_BUS_ADDRESS": address,
            # A path, so that clients with another XDG_RUNTIME_DIR find it too.
            "WAYLAND_DISPLAY": str(self.run_dir / display),
            "SWAYSOCK": swaysock,
            "XDG_SESSION_TYPE": "wayland",
            "XDG_CURRENT_DESKTOP": "sway",
            "GDK_BACKEND": "wayland",
            "QT_QPA_PLATFORM": "wayland",
            "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1",
        }
        # A seat needs a keyboard before a window gets keyboard focus: an idle virtual one.
        self.spawn(["wtype", "-s", "100000000"], "wtype-idle.log")

    def _display_name(self) -> str:
        names = sorted(p.name for p in self.run_dir.glob("wayland-*") if p.suffix != ".lock")
        return names[0] if names else ""

    def _sway_socket(self) -> str:
        found = sorted(self.run_dir.glob("sway-ipc.*.sock"))
        return str(found[0]) if found else ""

    def spawn(
        self, args: list[str], log_name: str, env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        with (self.workdir / log_name).open("ab") as log:
            process = subprocess.Popen(
                args,
                env=env if env is not None else self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )
        self.processes.append(process)
        return process

    def run(self, *args: str, timeout: float = 10, check: bool = True, data: bytes = b"") -> str:
        out = self.workdir / "cmd.out"
        with out.open("wb") as stdout:
            result = subprocess.run(
                args,
                check=False,
                env=self.env,
                input=data,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        text = out.read_text(errors="replace")
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {text}")
        return text

    # -- the desktop, as a user sees it ---------------------------------------------------

    def tree(self) -> dict[str, Any]:
        return dict(json.loads(self.run("swaymsg", "-t", "get_tree", "--raw")))

    def windows(self) -> list[dict[str, Any]]:
        def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
            yield node
            for child in (*node.get("nodes", ()), *node.get("floating_nodes", ())):
                yield from walk(child)

        return [n for n in walk(self.tree()) if n.get("type") in ("con", "floating_con")]

    def focused_window(self) -> dict[str, Any]:
        return next((n for n in self.windows() if n.get("focused")), {})

    def focus(self, con_id: int) -> None:
        self.run("swaymsg", f"[con_id={con_id}] focus")
        wait_until(lambda: self.focused_window().get("id") == con_id, 5, f"focus on {con_id}")

    def set_clipboard(self, text: str, *, primary: bool = False) -> None:
        """Another program (wl-copy) owns the clipboard (or the primary selection), like a
        user's copy elsewhere."""
        flag = ["--primary"] if primary else []
        subprocess.run(
            ["wl-copy", *flag],
            input=text.encode(),
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
            check=True,
        )
        wait_until(lambda: self.get_clipboard(primary=primary) == text, 3, "wl-copy to own it")

    def get_clipboard(self, *, primary: bool = False) -> str | None:
        flag = ["--primary"] if primary else []
        try:
            result = subprocess.run(
                ["wl-paste", *flag, "--no-newline"],
                env=self.env,
                capture_output=True,
                timeout=5,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None
        return result.stdout.decode(errors="replace") if result.returncode == 0 else None

    def type_text(self, text: str) -> None:
        """Plain text through the virtual keyboard (reaches GTK; chords do not, here)."""
        self.run("wtype", "--", text)

    def _stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self._stop_session_leftovers()

    def _stop_session_leftovers(self) -> None:
        """Activated services and wl-copy servers of this session, by pid. They were
        re-parented to us (the subreaper); only those pids are reaped, never a child some
        other fixture still owns."""
        marker = f"XDG_RUNTIME_DIR={self.run_dir}\0".encode()
        deadline = time.monotonic() + 5
        for _ in range(3):
            found = [pid for pid in _pids() if marker in _environ(pid)]
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            while time.monotonic() < deadline and any(_alive(pid) for pid in found):
                _reap(found)
                time.sleep(0.05)
            _reap(found)


def _pids() -> list[int]:
    return [
        int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()
    ]


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return False
    return state != "Z"


def _reap(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@dataclass
class Editor:
    path: Path
    process: subprocess.Popen[bytes]
    session: WaylandSession
    con_id: int
    window: int
    """The window's number in mousepad's instance (its D-Bus action path)."""

    def save(self) -> str:
        """Save through mousepad's exported ``file.save`` action; the file's new text."""
        before = self.path.stat().st_mtime_ns
        self.session.run(
            "gdbus", "call", "--session", "--dest", "org.xfce.mousepad",
            "--object-path", f"/org/xfce/mousepad/window/{self.window}",
            "--method", "org.gtk.Actions.Activate", "file.save", "[]", "{}",
        )  # fmt: skip
        wait_until(lambda: self.path.stat().st_mtime_ns != before, 5, "mousepad to save")
        return self.path.read_text(encoding="utf-8")

    def modified(self) -> bool:
        """mousepad marks a document with unsaved changes by a '*' in the window title."""
        node = next((n for n in self.session.windows() if n.get("id") == self.con_id), {})
        return str(node.get("name", "")).startswith("*")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(10)


def open_mousepad(
    session: WaylandSession, text: str, line: int, column: int, *, window: int = 1
) -> Editor:
    """A native Wayland mousepad window, focused. A second window (``window=2``) opens in
    the running instance, as mousepad does for a user."""
    path = session.workdir / f"doc-{time.monotonic_ns()}.txt"
    path.write_text(text, encoding="utf-8")
    known = {n.get("id") for n in session.windows()}
    process = session.spawn(
        ["mousepad", "--opening-mode=window", f"--line={line}", f"--column={column}", str(path)],
        "mousepad.log",
    )

    def new_focused() -> int:
        node = session.focused_window()
        fresh = node.get("app_id") == "mousepad" and node.get("id") not in known
        return int(node["id"]) if fresh else 0

    con_id = wait_until(new_focused, 20, "a new focused mousepad window")
    return Editor(path, process, session, con_id, window)


# -- AT-SPI, as any assistive technology sees it ---------------------------------------------

_FOCUSED_TEXT = """
import sys, time
import gi
gi.require_version("Atspi", "2.0")
from gi.repository import Atspi
pid, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
contains = sys.argv[3] if len(sys.argv) > 3 else ""
while time.monotonic() < deadline:
    desktop = Atspi.get_desktop(0)
    for i in range(desktop.get_child_count()):
        app = desktop.get_child_at_index(i)
        if app is None or app.get_process_id() != pid:
            continue
        queue, seen = [app], 0
        while queue and seen < 500:
            node = queue.pop(0)
            seen += 1
            states = node.get_state_set()
            if states.contains(Atspi.StateType.FOCUSED) and "Text" in node.get_interfaces():
                if contains in (Atspi.Text.get_text(node, 0, -1) or ""):
                    print("ready")
                    sys.exit(0)
            queue.extend(node.get_child_at_index(k) for k in range(node.get_child_count()))
    time.sleep(0.1)
print("not ready")
"""


def wait_accessible(
    session: WaylandSession | XSession, pid: int, within: float = 10, contains: str = ""
) -> None:
    """Until the app at ``pid`` shows its focused text field (holding ``contains``) over
    AT-SPI. Qt builds its accessibility tree on the first question; asked first by the
    test, the daemon's own capture then finds it ready (else it falls back to the
    keyboard capture). A new window shows its document and caret only then."""
    out = session.run(sys.executable, "-c", _FOCUSED_TEXT, str(pid), str(within), contains,
                      timeout=within + 10)  # fmt: skip
    assert "ready" in out.split(), out

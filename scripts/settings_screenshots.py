"""Screenshots of every settings page under a private Xvfb, for docs/images/.

    .venv/bin/python scripts/settings_screenshots.py [OUT_DIR]

The panel runs on Qt's xcb platform against the Xvfb and each page is read back from the X
server. The Backends page shows a real Test (through the engine, over HTTP) against a
loopback server speaking llama-server's protocol (``tests.servers.llamacpp``) that answers
the Test's own prompt (``def add(a, b): return ▮ … print(add(2, 3))``) with the middle a
real code model gives, ``a + b``, paced like a small model on a CPU: the picture shows
what a user with a real model sees. (The real llama-server Test is in the tests.)
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyfill.daemon.engine.trial import TRIAL_CONTEXT  # noqa: E402
from tests.servers.http import LoopbackServer  # noqa: E402

#: The middle a code model puts between the Test's prefix and suffix.
TRIAL_MIDDLE = "a + b"

DEMO = """\
# anyfill configuration (screenshot demo)
[[backends]]
name = "llamacpp"
type = "llamacpp"
url = "{url}"

[[backends]]
name = "codestral"
type = "mistral-fim"
url = "https://codestral.mistral.ai"
model = "codestral-latest"

[backends.limits]
requests_per_minute = 60

[[backends]]
name = "managed"
type = "llamacpp-managed"
model = "qwen2.5-coder-1.5b"

[routing]
default = ["llamacpp", "codestral", "managed"]
hedge_after_ms = 400

[[insert.apps]]
match = "(?i)^firefox$"
title = "(?i)webmail"
mode = "preview"
backends = ["llamacpp"]

[[insert.apps]]
match = "(?i)(xterm|konsole|gnome-terminal)"
paste_keys = "<ctrl>+<shift>+v"
copy_keys = "<ctrl>+<shift>+c"

[[insert.apps]]
match = "(?i)(keepassxc?|1password|bitwarden)"
disabled = true
"""

PAGES = (
    "backends",
    "routing",
    "hotkeys",
    "capture",
    "apps",
    "suggestions",
    "privacy",
    "context",
    "advanced",
)


def child(out: Path, config: Path, url: str) -> None:
    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtWidgets import QApplication

    app = QApplication([sys.argv[0]])
    # The window's own state (size, last page) lives with the session's files, not in docs/.
    state = str(config.parent.parent)
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, state)
    from anyfill.ui.bridge import CoreBridge
    from anyfill.ui.settings.draft import load_for_editing
    from anyfill.ui.settings.standalone import panel_core
    from anyfill.ui.settings.window import SettingsWindow

    bridge = CoreBridge(load_for_editing(config), runner=panel_core)
    bridge.start()
    window = SettingsWindow(bridge, config)
    window.resize(960, 660)
    window.move(0, 0)
    window.show()

    def settle(ms: int = 300) -> None:
        from PySide6.QtCore import QEventLoop, QTimer

        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def shoot(name: str) -> None:
        settle()
        screen = window.screen()
        pixmap = screen.grabWindow(window.winId())
        pixmap.save(str(out / f"settings-{name}.png"))
        print(f"wrote {out / f'settings-{name}.png'}")

    settle(800)
    backends = window.pages[0]
    if url:
        backends.list.setCurrentRow(0)  # type: ignore[attr-defined]
        backends.test.click()  # type: ignore[attr-defined]
        for _ in range(100):
            settle(100)
            if backends.result.text()[:1] in ("✓", "✗"):  # type: ignore[attr-defined]
                break
    titles = [page.title for page in window.pages]  # type: ignore[attr-defined]
    if len(titles) != len(PAGES):
        raise SystemExit(f"the panel has the pages {titles}; name each in PAGES")
    for index, name in enumerate(PAGES):
        window.nav.setCurrentRow(index)
        if name == "hotkeys":  # as if the user just recorded Ctrl+Alt+J for Complete
            hotkeys = window.pages[index]
            hotkeys.edits["complete"].show_value("<ctrl>+<alt>+j")  # type: ignore[attr-defined]
            hotkeys.edits["complete"].recorded.emit("<ctrl>+<alt>+j")  # type: ignore[attr-defined]
        if name == "apps":
            window.pages[index].table.setCurrentCell(0, 0)  # type: ignore[attr-defined]
        shoot(name)
        if name == "hotkeys":
            window.draft.revert()
    # A field the models refuse: named next to it, Save off.
    window.nav.setCurrentRow(0)
    backends.list.setCurrentRow(1)  # type: ignore[attr-defined]
    backends.url.setText("codestral.mistral.ai")  # type: ignore[attr-defined]
    backends.url.textEdited.emit("codestral.mistral.ai")  # type: ignore[attr-defined]
    limit = next(r for r in backends.form.rows if r.key == ("limits", "requests_per_minute"))  # type: ignore[attr-defined]
    limit.editor.setValue(-5)
    shoot("error")
    window.draft.revert()
    window.close()
    bridge.stop()
    del Qt, app


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
        return
    from tests.e2e.harness import XSession

    out = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs" / "images").resolve()
    out.mkdir(parents=True, exist_ok=True)
    with XSession.start() as x, test_server() as server:
        # Where a user's file lives (shown on the Advanced page as ~/.config/...).
        config_home = Path(x.env["HOME"]) / ".config"
        config = config_home / "anyfill" / "config.toml"
        config.parent.mkdir(parents=True)
        env = {**x.env, "XDG_CONFIG_HOME": str(config_home), "QT_QPA_PLATFORM": "xcb"}
        config.write_text(DEMO.format(url=server.url))
        run_child(out, config, server.url, env)
        asked = [r.json() for r in server.requests if r.path == "/infill"]
        sent = [(body.get("input_prefix"), body.get("input_suffix")) for body in asked]
        if (TRIAL_CONTEXT.prefix, TRIAL_CONTEXT.suffix) not in sent:
            raise SystemExit(f"the Backends Test did not send its prompt to /infill: {asked}")


@contextlib.contextmanager
def test_server() -> Iterator[LoopbackServer]:
    """llama-server's protocol on 127.0.0.1, answering the Test's prompt as a real model."""
    from tests.servers.llamacpp import LlamaCpp
    from tests.servers.script import Reply

    answer = Reply(text=TRIAL_MIDDLE, chunks=["a", " +", " b"], delay_s=0.09, chunk_delay_s=0.02)
    responder = LlamaCpp(default=answer, model_path="/models/qwen2.5-coder-1.5b-instruct-q8_0.gguf")
    with LoopbackServer.in_thread(responder) as server:
        yield server


def run_child(out: Path, config: Path, url: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, __file__, "--child", str(out), str(config), url],
        env=env,
        check=True,
        timeout=120,
    )


if __name__ == "__main__":
    main()

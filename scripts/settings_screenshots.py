"""Screenshots of every settings page under a private Xvfb, for docs/images/.

    .venv/bin/python scripts/settings_screenshots.py [OUT_DIR]

The panel runs on Qt's xcb platform against the Xvfb and each page is read back from the X
server. With the llama.cpp assets (ANYFILL_LLAMA_ASSETS or .venv/llama-assets) the Backends
page shows a real Test against llama-server and its tiny test model (random weights: its
answer is noise; the latency and the mode are real).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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

[routing]
default = ["llamacpp", "codestral"]
hedge_after_ms = 400

[[insert.apps]]
match = "(?i)^firefox$"
title = "(?i)webmail"
mode = "preview"
backends = ["llamacpp"]

[[insert.apps]]
match = "(?i)(keepassxc?|1password|bitwarden)"
disabled = true
"""

PAGES = ("backends", "routing", "hotkeys", "capture", "apps", "privacy", "advanced")


def child(out: Path, config: Path, url: str) -> None:
    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtWidgets import QApplication

    app = QApplication([sys.argv[0]])
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, str(out.parent))
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
    from tests.llm.server import TINY_FIM_MODEL, LlamaServer, find_assets

    out = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs" / "images").resolve()
    out.mkdir(parents=True, exist_ok=True)
    assets_file = REPO / ".venv" / "llama-assets"
    if "ANYFILL_LLAMA_ASSETS" not in os.environ and assets_file.exists():
        os.environ["ANYFILL_LLAMA_ASSETS"] = assets_file.read_text().strip()
    assets = find_assets()
    with XSession.start() as x:
        # Where a user's file lives (shown on the Advanced page as ~/.config/...).
        config_home = Path(x.env["HOME"]) / ".config"
        config = config_home / "anyfill" / "config.toml"
        config.parent.mkdir(parents=True)
        env = {**x.env, "XDG_CONFIG_HOME": str(config_home), "QT_QPA_PLATFORM": "xcb"}
        if assets is not None:
            with LlamaServer(assets / TINY_FIM_MODEL) as server:
                config.write_text(DEMO.format(url=server.url))
                run_child(out, config, server.url, env)
        else:
            config.write_text(DEMO.format(url="http://127.0.0.1:8080"))
            run_child(out, config, "", env)


def run_child(out: Path, config: Path, url: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, __file__, "--child", str(out), str(config), url],
        env=env,
        check=True,
        timeout=120,
    )


if __name__ == "__main__":
    main()

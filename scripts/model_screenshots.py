"""Screenshots of the tray's FIM model download under a private Xvfb, for docs/images/.

    .venv/bin/python scripts/model_screenshots.py [OUT_DIR]

The real tray application (TrayApp, CoreBridge, Core, Engine with a ``llamacpp-managed``
backend) runs on Qt's xcb platform. ``model-download-ask.png``: the question for the
default model (``qwen2.5-coder-1.5b``), as a fresh user sees it when the managed server
reports its model missing. ``model-download-progress.png``: a download in progress from
the loopback Hub of the tests (``tests/servers/hfhub.py``, through the real
download code) serving the tests' tiny FIM model over a slowed link, so the bar
stops half-way for the picture; the real catalogue files are hundreds of MB.
Needs ``ANYFILL_LLAMA_ASSETS`` (the tests' llama-server and tiny model; `scripts/setup`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

REVISION = "0123456789abcdef0123456789abcdef01234567"


def child(out: Path, assets: Path) -> None:
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

    from anyfill.config.model import Settings
    from anyfill.daemon.core import Core
    from anyfill.daemon.engine.engine import Engine
    from anyfill.daemon.managed.prestart import start_managed_servers
    from anyfill.daemon.models import catalog
    from anyfill.daemon.models.download import ModelDownload
    from anyfill.ui.app import TrayApp
    from anyfill.ui.bridge import CoreBridge
    from tests.servers.hfhub import HfHub, HubFile
    from tests.servers.http import LoopbackServer

    app = QApplication([sys.argv[0]])
    app.setQuitOnLastWindowClosed(False)

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def wait(what: Callable[[], bool], within_s: float = 30) -> None:
        for _ in range(int(within_s * 10)):
            if what():
                return
            settle(100)
        raise SystemExit("timed out waiting for the tray")

    def shoot(widget: QWidget, name: str) -> None:
        settle(400)
        pixmap = widget.screen().grabWindow(widget.winId())
        pixmap.save(str(out / name))
        print(f"wrote {out / name}")

    async def engine_only(core: Core, stop: asyncio.Event, ready: Callable[[], None]) -> None:
        async with Engine(core.settings, bus=core.bus) as engine:
            core.backends = lambda: engine.backends
            await start_managed_servers(engine.backends, core.settings)
            ready()
            await stop.wait()

    def tray_for(model: str, endpoint: str) -> TrayApp:
        settings = Settings.model_validate(
            {
                "backends": [
                    {
                        "name": "managed",
                        "type": "llamacpp-managed",
                        "model": model,
                        "server": {"binary": str(assets / "llama-server")},
                    }
                ],
                "routing": {"default": ["managed"]},
                "models": {"endpoint": endpoint},
                "ui": {"notifications": False},
            }
        )
        bridge = CoreBridge(settings, runner=engine_only)
        tray = TrayApp(app, settings, out / "unused.toml", bridge=bridge)
        tray.start()
        wait(lambda: "managed" in tray.state.servers)
        return tray

    def offer(tray: TrayApp) -> QMessageBox:
        tray.tray.rebuild_menu()
        action = next(
            a for a in tray.tray.menu.actions() if a.text().startswith("Download the FIM")
        )
        action.trigger()
        box = tray.downloads.ask_box
        assert box is not None
        box.move(40, 40)
        return box

    # 1. A fresh user: the default model is missing; the tray asks.
    first = tray_for(catalog.CATALOG[0].name, "http://127.0.0.1:9")
    box = offer(first)
    shoot(box, "model-download-ask.png")
    box.button(QMessageBox.StandardButton.No).click()
    first.bridge.stop()

    # 2. Yes: the download runs (the tiny model over a slow loopback link).
    data = (assets / "tiny-fim.gguf").read_bytes()
    hub_file = HubFile("anyfill-tests/tiny-fim-GGUF", "tiny-fim.gguf", REVISION, data)
    tiny = catalog.CatalogModel(
        name="tiny-fim",
        label="the tests' tiny FIM model",
        repo_id=hub_file.repo_id,
        filename=hub_file.filename,
        revision=REVISION,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        license="test",
        note="",
    )
    catalog.CATALOG = (*catalog.CATALOG, tiny)
    responder = HfHub([hub_file], chunk_delay_s=0.03)
    with LoopbackServer.in_thread(responder) as hub, LoopbackServer.in_thread(responder) as cdn:
        responder.cdn_url = cdn.url
        second = tray_for(tiny.name, hub.url)
        seen: list[ModelDownload] = []
        second.bridge.core_event.connect(
            lambda e: seen.append(e) if isinstance(e, ModelDownload) else None
        )
        box = offer(second)
        box.button(QMessageBox.StandardButton.Yes).click()
        wait(lambda: any(0 < e.done < e.total for e in seen))
        dialog = second.downloads.progress
        assert dialog is not None
        dialog.move(40, 40)
        shoot(dialog, "model-download-progress.png")
        second.downloads.cancel()
        wait(lambda: seen[-1].state == "cancelled")
        second.bridge.stop()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    from tests.e2e.harness import XSession
    from tests.llm.server import find_assets

    assets = find_assets()
    if assets is None:
        raise SystemExit("set ANYFILL_LLAMA_ASSETS (the tests' llama-server and tiny model)")
    out = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs" / "images").resolve()
    out.mkdir(parents=True, exist_ok=True)
    with XSession.start() as x:
        env = {**x.env, "QT_QPA_PLATFORM": "xcb"}
        env.pop("ANYFILL_CONFIG", None)
        subprocess.run(
            [sys.executable, __file__, "--child", str(out), str(assets)],
            env=env,
            check=True,
            timeout=120,
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

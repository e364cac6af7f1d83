"""Write packaging/'s per-OS files and PNG icons from their one source.

    python packaging/generate.py           write them
    python packaging/generate.py --check   exit 1 naming each file that is out of date

The text files come from ``anyfill.daemon.autostart.entries`` (what ``anyfill autostart
enable`` writes, with a system-wide command here); the PNGs are rendered from
``assets/icons/hicolor/scalable/apps/anyfill.svg`` with Qt's SVG renderer.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from anyfill.daemon.autostart import entries

HERE = Path(__file__).resolve().parent
ICONS = HERE / "assets" / "icons" / "hicolor"
SVG = ICONS / "scalable" / "apps" / "anyfill.svg"
PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
# Where a distribution or the bundle's installer puts the program.
LINUX_COMMAND = ("/usr/bin/anyfill", "run")
MAC_COMMAND = ("/Applications/anyfill.app/Contents/MacOS/anyfill", "run")
WINDOWS_COMMAND = (r"C:\Program Files\anyfill\anyfill.exe", "run")
# A PNG re-rendered by another Qt version may differ by antialiasing, never by more.
PIXEL_TOLERANCE = 8


def text_files() -> dict[Path, bytes]:
    return {
        HERE / "linux" / "anyfill.desktop": entries.desktop_launcher(("anyfill", "run")).encode(),
        HERE / "linux" / "autostart" / "anyfill.desktop": entries.xdg_autostart(
            ("anyfill", "run")
        ).encode(),
        HERE / "linux" / "anyfill.service": entries.systemd_unit(LINUX_COMMAND).encode(),
        HERE / "macos" / f"{entries.MAC_LABEL}.plist": entries.launch_agent(
            MAC_COMMAND, "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        ),
        HERE / "windows" / "anyfill-run.reg": entries.windows_run_entry(WINDOWS_COMMAND)
        .as_reg_file()
        .encode("utf-16"),  # regedit reads UTF-16 with a BOM
    }


def png_path(size: int) -> Path:
    return ICONS / f"{size}x{size}" / "apps" / "anyfill.png"


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    renderer = QSvgRenderer(QByteArray(SVG.read_bytes()))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def png_differs(path: Path, fresh: bytes) -> str:
    """Why the PNG at ``path`` is not what the SVG renders to now; empty if it is."""
    from PySide6.QtGui import QImage

    if not path.exists():
        return "missing"
    old, new = QImage(), QImage()
    old.loadFromData(path.read_bytes())
    new.loadFromData(fresh)
    if old.size() != new.size():
        return f"{old.width()}x{old.height()} instead of {new.width()}x{new.height()}"
    worst = 0
    for y in range(new.height()):
        for x in range(new.width()):
            a, b = old.pixelColor(x, y), new.pixelColor(x, y)
            worst = max(
                worst,
                abs(a.red() - b.red()),
                abs(a.green() - b.green()),
                abs(a.blue() - b.blue()),
                abs(a.alpha() - b.alpha()),
            )
    return f"pixels differ by up to {worst}" if worst > PIXEL_TOLERANCE else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    check = parser.parse_args().check
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    stale: list[str] = []
    for path, data in text_files().items():
        if path.exists() and path.read_bytes() == data:
            continue
        stale.append(f"{path.relative_to(HERE)}: differs from anyfill.daemon.autostart")
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for size in PNG_SIZES:
        path = png_path(size)
        fresh = render_png(size)
        why = png_differs(path, fresh)
        if not why:
            continue
        stale.append(f"{path.relative_to(HERE)}: {why}")
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(fresh)
    for line in stale:
        print(("stale " if check else "wrote ") + line)
    if check and stale:
        print("run: python packaging/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tray icon in each state, drawn here as SVG.

Every state is a coloured rounded square with a white glyph and a dark rim: the white
reads on dark panels, the rim and the saturated square on light ones. States differ by
glyph as well as by colour, so they stay apart for colour-blind users too.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QIcon, QImage, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from anyfill.ui.state import Look

SIZES = (16, 22, 24, 32, 48, 64, 128)

COLOURS: dict[Look, str] = {
    "idle": "#2563eb",  # blue
    "working": "#d97706",  # amber
    "preview": "#7c3aed",  # violet
    "paused": "#6b7280",  # grey
    "cooling": "#0e7490",  # teal
    "error": "#dc2626",  # red
}

_CARET = (
    # An I-beam text caret between two angle brackets: "fill at the caret".
    '<path d="M28 16h8M32 16v32M28 48h8" stroke="#fff" stroke-width="5" '
    'stroke-linecap="round" fill="none"/>'
    '<path d="M20 22l-8 10 8 10M44 22l8 10-8 10" stroke="#fff" stroke-width="5" '
    'stroke-linecap="round" stroke-linejoin="round" fill="none"/>'
)
_GLYPHS: dict[Look, str] = {
    "idle": _CARET,
    "working": _CARET,
    "preview": (
        # The caret followed by ghost text (dashes): a completion shown, not yet inserted.
        '<path d="M18 16h8M22 16v32M18 48h8" stroke="#fff" stroke-width="5" '
        'stroke-linecap="round" fill="none"/>'
        '<path d="M32 32h6M44 32h6M32 42h6" stroke="#fff" stroke-width="5" '
        'stroke-linecap="round" fill="none" opacity="0.9"/>'
    ),
    "paused": '<rect x="20" y="17" width="8" height="30" rx="2" fill="#fff"/>'
    '<rect x="36" y="17" width="8" height="30" rx="2" fill="#fff"/>',
    "cooling": (
        # An hourglass: the backend asked us to wait.
        '<path d="M21 15h22M21 49h22M24 15c0 10 16 10 16 17s-16 7-16 17M40 15c0 10-16 10-16 '
        '17s16 7 16 17" stroke="#fff" stroke-width="4.5" stroke-linecap="round" '
        'stroke-linejoin="round" fill="none"/>'
    ),
    "error": '<rect x="28" y="13" width="8" height="26" rx="3" fill="#fff"/>'
    '<circle cx="32" cy="48" r="4.8" fill="#fff"/>',
}


def svg(look: Look, count: int = 0) -> str:
    """The SVG document of one state; ``count`` (working) is drawn as a badge."""
    badge = ""
    if look == "working" and count > 0:
        label = str(count) if count < 10 else "9+"
        size = 22 if len(label) == 1 else 26
        badge = (
            f'<circle cx="{64 - size / 2 - 1}" cy="{64 - size / 2 - 1}" r="{size / 2}" '
            'fill="#fff" stroke="#1f2937" stroke-width="2"/>'
            f'<text x="{64 - size / 2 - 1}" y="{64 - size / 2 + 5.5}" font-family="sans-serif" '
            f'font-size="16" font-weight="bold" text-anchor="middle" fill="#1f2937">{label}</text>'
        )
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">'
        f'<rect x="2" y="2" width="60" height="60" rx="14" fill="{COLOURS[look]}" '
        'stroke="#111827" stroke-opacity="0.55" stroke-width="2.5"/>'
        f"{_GLYPHS[look]}{badge}</svg>"
    )


def render(look: Look, size: int, count: int = 0) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    renderer = QSvgRenderer(QByteArray(svg(look, count).encode()))
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image


_cache: dict[tuple[Look, int], QIcon] = {}


def icon(look: Look, count: int = 0) -> QIcon:
    """The icon of a state, rendered at every common tray size (cached)."""
    count = min(count, 10) if look == "working" else 0
    key = (look, count)
    cached = _cache.get(key)
    if cached is None:
        cached = QIcon()
        for size in SIZES:
            cached.addPixmap(QPixmap.fromImage(render(look, size, count)))
        _cache[key] = cached
    return cached

"""Ghost text: the suggestion drawn dimmed at the caret, in the application's own font.

An X11 window the window manager never sees (override-redirect), with no frame, that
never takes the focus and whose input region is empty (``WindowTransparentForInput``: a
click goes to the application under it). Without a compositor a window cannot be
see-through, so the window's shape is the glyphs themselves (a bounding-shape mask):
only the letters cover the application.

When text follows the caret on its line, drawing over it would hide what the user wrote;
the suggestion then shows in a small capsule just below the caret (KeyType's lesson).
Multi-line suggestions show their first lines. The core decides everything else (keys,
accept, dismiss); this only draws what the preview events say.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import (
    QBitmap,
    QColor,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QImage,
    QPainter,
    QPaintEvent,
    QRegion,
)
from PySide6.QtWidgets import QWidget

from anyfill.daemon.bus.status import PreviewShown, PreviewText
from anyfill.ui.layer_surface import LayerPresenter

log = logging.getLogger("anyfill.ui.ghost")

GHOST_COLOR = QColor(128, 128, 128)
CAPSULE_BACK = QColor(246, 246, 248)
CAPSULE_EDGE = QColor(190, 190, 196)
CAPSULE_PAD = 4
CAPSULE_GAP = 2
MORE = " …"
"""Shown after the last line drawn when the suggestion has more lines."""


def app_font(family: str, points: float, caret_height: int) -> QFont:
    """The application's font where it told AT-SPI; else the desktop's, sized from the
    caret (a caret is about as tall as a line of text)."""
    font = QFont(family) if family else QFont(QGuiApplication.font())
    if points > 0:
        font.setPointSizeF(points)
    elif caret_height > 0:
        font.setPixelSize(max(round(caret_height * 0.85), 8))
    return font


class GhostText(QWidget):
    """One suggestion at a time: :meth:`open_for`, :meth:`show_text`, :meth:`close_for`."""

    def __init__(
        self, parent: QWidget | None = None, presenter: LayerPresenter | None = None
    ) -> None:
        super().__init__(parent)
        self._presenter = presenter
        """Wayland: the ghost is drawn into an image shown on the popup's layer surface."""
        self.setWindowFlags(
            Qt.WindowType.Tool
            | Qt.WindowType.FramelessWindowHint
            | Qt.WindowType.WindowStaysOnTopHint
            | Qt.WindowType.WindowDoesNotAcceptFocus
            | Qt.WindowType.X11BypassWindowManagerHint
            | Qt.WindowType.WindowTransparentForInput
        )
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating)
        self.setAttribute(Qt.WidgetAttribute.WA_X11DoNotAcceptFocus)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setWindowTitle("anyfill suggestion")
        self.preview_id: int | None = None
        self.text = ""
        self.capsule = False
        self.lines: list[str] = []
        self._shown: PreviewShown | None = None
        self._font = QFont()
        self._indent = 0

    def fits(self, event: PreviewShown) -> bool:
        """Ghost text needs a caret rectangle; without one the popup shows instead."""
        caret = event.caret
        return event.style == "ghost" and caret is not None and caret.height > 0

    def open_for(self, event: PreviewShown) -> None:
        assert event.caret is not None
        self.preview_id, self._shown, self.text = event.preview_id, event, ""
        self.capsule = bool(event.line_after.strip())
        self._font = app_font(event.font_family, event.font_size, event.caret.height)
        self.hide()  # nothing to draw until the text comes

    def show_text(self, event: PreviewText) -> None:
        if event.preview_id != self.preview_id or self._shown is None:
            return
        self.text = event.text
        if not event.final or not event.text:
            return  # streamed pieces are not drawn: a ghost that grows is distracting
        self._layout()
        if self._presenter is not None:
            self._present()
            return
        self.show()
        self.raise_()

    def close_for(self, preview_id: int) -> None:
        if preview_id == self.preview_id:
            self.preview_id = None
            self.hide()
            if self._presenter is not None:
                self._presenter.hide()

    @property
    def on_layer_surface(self) -> bool:
        return self._presenter is not None

    def _present(self) -> None:
        """Wayland: the ghost as an image with a see-through background (the compositor
        blends it) on the layer surface, at the caret of the output the core named."""
        assert self._presenter is not None
        shown = self._shown
        assert shown is not None
        image = QImage(self.size(), QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        self._paint(painter, inline_fill=False)
        painter.end()
        area = shown.screen
        left, top, name = (area.x, area.y, area.name) if area is not None else (0, 0, "")
        geometry = self.geometry()
        self._presenter.present(image, geometry.x() - left, geometry.y() - top, name)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "ghost %d painted %d characters at %.6f on a layer surface",
                shown.preview_id,
                len(self.text),
                time.monotonic(),
            )

    # -- drawing ------------------------------------------------------------------------

    def _layout(self) -> None:
        shown = self._shown
        assert shown is not None
        assert shown.caret is not None
        caret = shown.caret
        all_lines = self.text.split("\n")
        self.lines = all_lines[: max(shown.lines, 1)]
        if len(all_lines) > len(self.lines):
            self.lines[-1] += MORE
        metrics = QFontMetrics(self._font)
        if self.capsule:
            width = max(metrics.horizontalAdvance(line) for line in self.lines) + 2 * CAPSULE_PAD
            height = metrics.lineSpacing() * len(self.lines) + 2 * CAPSULE_PAD
            self.setGeometry(
                QRect(QPoint(caret.x, caret.y + caret.height + CAPSULE_GAP), QSize(width, height))
            )
            self._indent = 0
            self.clearMask()
            return
        # Inline: the first line goes on at the caret; the others start where the caret's
        # line starts, found from the width of the text before the caret on it.
        indent = 0
        before = shown.line_before
        if len(before) < 60 and "\t" not in before:
            indent = min(metrics.horizontalAdvance(before), caret.x)
        first = metrics.horizontalAdvance(self.lines[0])
        rest = max((metrics.horizontalAdvance(line) for line in self.lines[1:]), default=0)
        width = max(first + indent, rest, 1)
        height = metrics.lineSpacing() * len(self.lines)
        # The caret rectangle spans the line down to its descent: the ghost's baseline
        # sits where the application's does when both fonts descend alike.
        top = caret.y + caret.height - metrics.height()
        self._indent = indent
        self.setGeometry(QRect(QPoint(caret.x - indent, top), QSize(width, height)))
        if self._presenter is None:
            self.setMask(self._glyph_mask(width, height))

    def _glyph_mask(self, width: int, height: int) -> QRegion:
        image = QImage(width, height, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        self._draw_lines(painter, QColor(0, 0, 0))
        painter.end()
        # Threshold, not dithering: a glyph's soft edge is in or out, never speckled.
        alpha = image.createAlphaMask(Qt.ImageConversionFlag.ThresholdAlphaDither)
        return QRegion(QBitmap.fromImage(alpha))

    def _draw_lines(self, painter: QPainter, color: QColor) -> None:
        painter.setFont(self._font)
        painter.setPen(color)
        metrics = QFontMetrics(self._font)
        pad = CAPSULE_PAD if self.capsule else 0
        for n, line in enumerate(self.lines):
            x = pad + (self._indent if n == 0 and not self.capsule else 0)
            painter.drawText(QPoint(x, pad + metrics.ascent() + n * metrics.lineSpacing()), line)

    def _paint(self, painter: QPainter, *, inline_fill: bool) -> None:
        if self.capsule:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(CAPSULE_EDGE)
            painter.setBrush(CAPSULE_BACK)
            painter.drawRoundedRect(self.rect().adjusted(0, 0, -1, -1), 6, 6)
        elif inline_fill:
            # X11 without a compositor: the window is shaped to the glyphs, so whatever
            # is under the shape is what shows; fill it with the ghost's colour.
            painter.fillRect(self.rect(), GHOST_COLOR)
        self._draw_lines(painter, GHOST_COLOR)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        self._paint(painter, inline_fill=True)
        painter.end()
        if self.preview_id is not None and log.isEnabledFor(logging.DEBUG):
            # When the ghost became visible, on the clock every process shares (bench).
            log.debug(
                "ghost %d painted %d characters at %.6f",
                self.preview_id,
                len(self.text),
                time.monotonic(),
            )

"""The preview popup: the completion at the caret before it goes in.

It never takes the keyboard focus (the paste must reach the target app, and the focus
guard must keep passing): a frameless tool window the window manager does not manage,
shown without activation. Its keys are grabbed by the core while it shows; the popup
itself only draws what the core's preview events say.

On Wayland no window can place itself or be sure not to get the focus: there the popup
is drawn off screen and each change is shown on a layer surface (:mod:`anyfill.ui.layer_surface`)
at the caret, on the output the core names.
"""

from __future__ import annotations

import html
import logging
import time

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import (
    QCursor,
    QFont,
    QFontDatabase,
    QFontMetrics,
    QGuiApplication,
    QHideEvent,
    QPaintEvent,
    QPalette,
)
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from anyfill.daemon.bus.status import PreviewShown, PreviewText
from anyfill.ui.layer_surface import LayerPresenter
from anyfill.ui.placement import place

log = logging.getLogger("anyfill.ui.popup")

MAX_LINES = 12
MAX_WIDTH_FRACTION = 0.6
_KEY_NAMES = {"<tab>": "Tab", "<enter>": "Enter", "<esc>": "Esc", "<alt>": "Alt"}


def key_label(chord: str) -> str:
    return "+".join(
        _KEY_NAMES.get(f"<{p.strip('<>')}>", p.strip("<>").title()) for p in chord.split("+")
    )


def hint_line(keys: tuple[tuple[str, str], ...]) -> str:
    accept = [key_label(chord) for name, chord in keys if name.startswith("accept")]
    named = {name: key_label(chord) for name, chord in keys}
    parts = []
    if accept:
        parts.append(f"{' / '.join(accept)} insert")
    if "dismiss" in named:
        parts.append(f"{named['dismiss']} dismiss")
    if "next" in named:
        parts.append(
            f"{named['previous']} / {named['next']} alternatives"
            if "previous" in named
            else f"{named['next']} next"
        )
    return "   ·   ".join(parts)


def wrapped(
    runs: list[tuple[str, str]], width: int, metrics: QFontMetrics
) -> list[tuple[str, str]]:
    """``runs`` (kind, text) with line breaks put in so that no line is wider than
    ``width``: at the last space that fits, else between characters. Nothing is dropped."""
    out: list[tuple[str, str]] = []
    line_width = 0.0
    last_space: tuple[int, int] | None = None  # (run in out, index in its text)
    for kind, text in runs:
        pieces: list[str] = []
        for char in text:
            if char == "\n":
                pieces.append(char)
                line_width, last_space = 0.0, None
                continue
            advance = metrics.horizontalAdvance(char)
            if line_width + advance > width and line_width > 0:
                if last_space is not None and last_space[0] == len(out):
                    # the space is in this run: break after it
                    cut = last_space[1] + 1
                    pieces.insert(cut, "\n")
                    line_width = sum(metrics.horizontalAdvance(c) for c in pieces[cut + 1 :])
                elif last_space is not None:
                    run, index = last_space
                    kind_then, text_then = out[run]
                    out[run] = (kind_then, text_then[: index + 1] + "\n" + text_then[index + 1 :])
                    rest = text_then[index + 1 :] + "".join(t for _, t in out[run + 1 :])
                    line_width = sum(metrics.horizontalAdvance(c) for c in rest + "".join(pieces))
                else:
                    pieces.append("\n")
                    line_width = 0.0
                last_space = None
            pieces.append(char)
            line_width += advance
            if char == " ":
                last_space = (len(out), len(pieces) - 1)
        out.append((kind, "".join(pieces)))
    return out


class _Body(QLabel):
    """The completion's label; stamps each paint for the preview benchmark."""

    def __init__(self, popup: PreviewPopup) -> None:
        super().__init__(popup)
        self._popup = popup

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        popup = self._popup
        if popup.preview_id is not None and log.isEnabledFor(logging.DEBUG):
            # When text became visible, on the clock every process shares (bench/bench_tray).
            log.debug(
                "popup %d painted %d characters at %.6f",
                popup.preview_id,
                len(popup.text),
                time.monotonic(),
            )


class PreviewPopup(QFrame):
    """Shows one preview at a time; :meth:`open_for`, :meth:`show_text`, :meth:`close_for`."""

    def __init__(
        self,
        font_size: int = 11,
        parent: QWidget | None = None,
        presenter: LayerPresenter | None = None,
    ) -> None:
        super().__init__(parent)
        self._presenter = presenter
        self._position = QPoint()
        self._area = QRect()
        self.setWindowFlags(
            Qt.WindowType.Tool
            | Qt.WindowType.FramelessWindowHint
            | Qt.WindowType.WindowStaysOnTopHint
            | Qt.WindowType.WindowDoesNotAcceptFocus
            | Qt.WindowType.X11BypassWindowManagerHint
        )
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating)
        self.setAttribute(Qt.WidgetAttribute.WA_X11DoNotAcceptFocus)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        if presenter is not None:
            self.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)  # drawn for the layer
        self.setObjectName("anyfillPreview")
        self.setWindowTitle("anyfill preview")
        self.setFrameShape(QFrame.Shape.Box)
        self._font_size = font_size
        self.preview_id: int | None = None
        self._shown: PreviewShown | None = None
        self._anchor = QRect()
        self._at_pointer = True
        self.text = ""
        self.final = False

        self._header = QLabel(self)
        self._body = _Body(self)
        self._hint = QLabel(self)
        for label in (self._header, self._body, self._hint):
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self._body.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(4)
        layout.addWidget(self._header)
        layout.addWidget(self._body)
        layout.addWidget(self._hint)
        self._style()

    def _style(self) -> None:
        palette = QGuiApplication.palette()
        base = palette.color(QPalette.ColorRole.ToolTipBase)
        text = palette.color(QPalette.ColorRole.ToolTipText)
        dark = base.lightness() < 128
        self._dim = "#8b949e" if dark else "#6b7280"
        self._mark = "#264f78" if dark else "#dbeafe"
        background = "#1f2430" if dark else "#fbfbfd"
        foreground = text.name() if dark else "#111827"
        self.setStyleSheet(
            f"#anyfillPreview {{ background: {background}; color: {foreground};"
            f" border: 1px solid {'#3b4252' if dark else '#9ca3af'}; }}"
            f"QLabel {{ color: {foreground}; background: transparent; }}"
        )
        small = QFont(self.font())
        small.setPointSizeF(max(self._font_size - 2, 6))
        self._header.setFont(small)
        self._hint.setFont(small)

    # -- events from the core ---------------------------------------------------------

    def open_for(self, event: PreviewShown) -> None:
        self.preview_id = event.preview_id
        self._shown = event
        self.text, self.final = "", False
        font = (
            QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
            if event.monospace
            else QFont(self.font())
        )
        if event.monospace:
            font.setStyleHint(QFont.StyleHint.TypeWriter)
            font.setFixedPitch(True)
        font.setPointSize(self._font_size)
        self._body.setFont(font)
        self._hint.setText(self._dimmed(event.hint or hint_line(event.keys)))
        self._header.setText(self._dimmed(f"anyfill · {event.app or 'preview'}"))
        self._anchor, self._at_pointer = self._anchor_for(event)
        if self._presenter is not None:
            self.show()  # drawn off screen; each render is then handed to the layer surface
            self._render()
            return
        self._render()
        self.show()
        self.raise_()

    def show_text(self, event: PreviewText) -> None:
        if event.preview_id != self.preview_id or self._shown is None:
            return
        self.text, self.final = event.text, event.final
        parts = [self._shown.app or "preview"]
        if event.backend:
            parts.append(event.backend)
        if event.ms is not None:
            parts.append(f"{event.ms:.0f} ms" if event.final else f"first text {event.ms:.0f} ms")
        if event.alternative:
            parts.append(f"alternative {event.alternative + 1}")
            if event.how:
                parts.append(event.how)
        header = " · ".join(html.escape(p) for p in parts)
        if event.error:
            header += f' · <span style="color:#dc2626">{html.escape(event.error)}</span>'
        self._header.setText(f'<span style="color:{self._dim}">anyfill · {header}</span>')
        self._render(error=bool(event.error))

    def _dimmed(self, text: str) -> str:
        return f'<span style="color:{self._dim}">{html.escape(text)}</span>'

    def close_for(self, preview_id: int) -> None:
        if preview_id == self.preview_id:
            self.preview_id = None
            self.hide()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        if self._presenter is not None:
            self._presenter.hide()

    # -- drawing and placement --------------------------------------------------------

    def _render(self, *, error: bool = False) -> None:
        shown = self._shown
        if shown is None:
            return
        width = self._text_width()
        metrics = QFontMetrics(self._body.font())
        before = shown.line_before.lstrip() if len(shown.line_before) > 40 else shown.line_before
        # The context is only there to show where the answer goes: cut it (the start of the
        # line before, the end of the line after) to a third of the width each. The
        # completion itself is never cut sideways: its long lines wrap.
        before = metrics.elidedText(before, Qt.TextElideMode.ElideLeft, width // 3)
        after = metrics.elidedText(shown.line_after, Qt.TextElideMode.ElideRight, width // 3)
        if self.text:
            lines = self.text.split("\n")
            if len(lines) > MAX_LINES:
                lines = [*lines[:MAX_LINES], "…"]
            runs = [("dim", before), ("mark", "\n".join(lines))]
            if not self.final:
                runs.append(("dim", "▍"))
        else:
            note = "failed" if error else "no completion" if self.final else "thinking…"
            runs = [("dim", before), ("note", note)]
        runs.append(("dim", after))
        # Broken into lines here, with the font's own widths: the label then shows exactly
        # these lines (a label that wraps by itself was given a height for other breaks,
        # and its first line was cut off). A <div>, not a <pre>: a <pre> draws in a
        # monospace family of its own, wider than the prose font the lines were measured
        # with (879 px on a 1280 px screen, where 768 was the bound).
        wrap_at = width
        for _ in range(4):
            broken = wrapped(runs, wrap_at, metrics)
            body = "".join(self._run_html(kind, text) for kind, text in broken)
            self._body.setText(f'<div style="white-space:pre">{body}</div>')
            # Shaped text (combining marks on their letters, kerning) can be wider than the
            # sum of the characters' widths: break again that much narrower.
            over = self._body.sizeHint().width() - width
            if over <= 0 or wrap_at <= metrics.averageCharWidth() * 8:
                break
            wrap_at -= over
        for label in (self._header, self._hint):
            # One line while it fits; a long one (a backend's error) wraps within the width.
            label.setWordWrap(False)
            label.setMaximumWidth(width)
            if label.sizeHint().width() > width:
                label.setWordWrap(True)
        self.adjustSize()
        self._place()

    def _run_html(self, kind: str, text: str) -> str:
        if kind == "mark":
            return f'<span style="background:{self._mark}">{html.escape(text)}</span>'
        if kind == "note":
            return f'<i style="color:{self._dim}">{html.escape(text)}</i>'
        return self._dimmed(text)

    def _text_width(self) -> int:
        """The widest the popup's text may be: a share of the screen, less the margins."""
        layout = self.layout()
        margins = self.contentsMargins()
        if layout is not None:
            margins += layout.contentsMargins()
        area = self._screen_area()
        return int(area.width() * MAX_WIDTH_FRACTION) - margins.left() - margins.right()

    def _anchor_for(self, event: PreviewShown) -> tuple[QRect, bool]:
        caret = event.caret
        if caret is not None and caret.width >= 0 and caret.height > 0:
            return QRect(caret.x, caret.y, max(caret.width, 1), caret.height), False
        if self._presenter is not None:
            return QRect(), True  # no pointer position on Wayland: the fixed place
        pointer = QCursor.pos()
        return QRect(pointer, pointer), True

    def _place(self) -> None:
        area = self._screen_area()
        self.setMaximumWidth(int(area.width() * MAX_WIDTH_FRACTION))
        size = self.sizeHint().boundedTo(self.maximumSize())
        self.resize(size)
        position = place(size, self._anchor, area, at_pointer=self._at_pointer)
        if self._presenter is None:
            self.move(position)
        else:
            self._position, self._area = position, area
            if self.isVisible():
                self._present()

    def _screen_area(self) -> QRect:
        """The output the core named (Wayland: the compositor knows the target's output,
        Qt does not), else the screen Qt finds under the anchor."""
        named = self._shown.screen if self._shown is not None else None
        if named is not None and named.width > 0 and named.height > 0:
            return QRect(named.x, named.y, named.width, named.height)
        screen = QGuiApplication.screenAt(self._anchor.center()) or QGuiApplication.primaryScreen()
        return screen.availableGeometry()

    def _present(self) -> None:
        assert self._presenter is not None
        image = self.grab().toImage()
        named = self._shown.screen if self._shown is not None else None
        self._presenter.present(
            image,
            self._position.x() - self._area.x(),
            self._position.y() - self._area.y(),
            named.name if named is not None else "",
            fixed=self.at_fixed_place,
        )
        if self.preview_id is not None and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "popup %d presented %d characters at %.6f",
                self.preview_id,
                len(self.text),
                time.monotonic(),
            )

    @property
    def anchor(self) -> QRect:
        return QRect(self._anchor)

    def position(self) -> QPoint:
        """Where the popup's top-left corner is on the desktop (on a layer surface, where
        it was put: a Wayland client has no window position to ask)."""
        return QPoint(self._position) if self._presenter is not None else self.pos()

    @property
    def on_layer_surface(self) -> bool:
        return self._presenter is not None

    @property
    def at_fixed_place(self) -> bool:
        """On a layer surface with no caret to go to: centred at the top of the output."""
        return self._presenter is not None and self._anchor.isNull()

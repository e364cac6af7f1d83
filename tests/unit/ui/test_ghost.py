"""Ghost text on the offscreen platform: never focusable, no input; inline at the caret in
the application's font, shaped to its glyphs; a capsule below the caret when text follows
on the line; the first lines of a long suggestion; the popup where no caret is known."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from pytestqt.qtbot import QtBot

from anyfill.daemon.bus.status import PreviewShown, PreviewText
from anyfill.daemon.context import CaretRect
from anyfill.ui.ghost import CAPSULE_GAP, MORE, GhostText, app_font

CARET = CaretRect(300, 200, 1, 20)


def shown(after: str = "", caret: CaretRect | None = CARET, **extra: object) -> PreviewShown:
    return PreviewShown(
        1, "Mousepad", caret, "total = ", after, False, style="ghost", auto=True, **extra
    )  # type: ignore[arg-type]


def test_the_ghost_takes_neither_focus_nor_clicks(qtbot: QtBot) -> None:
    ghost = GhostText()
    qtbot.addWidget(ghost)
    flags = ghost.windowFlags()
    assert flags & Qt.WindowType.WindowTransparentForInput  # input region empty on X11
    assert flags & Qt.WindowType.WindowDoesNotAcceptFocus
    assert flags & Qt.WindowType.X11BypassWindowManagerHint
    assert flags & Qt.WindowType.FramelessWindowHint
    assert ghost.testAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating)


def test_inline_at_the_caret_in_the_apps_font_shaped_to_its_letters(qtbot: QtBot) -> None:
    ghost = GhostText()
    qtbot.addWidget(ghost)
    event = shown(font_family="DejaVu Sans", font_size=14.0)
    assert ghost.fits(event)
    ghost.open_for(event)
    ghost.show_text(PreviewText(1, "price * count", "local"))
    assert not ghost.isVisible()  # streaming pieces are not drawn
    ghost.show_text(PreviewText(1, "price * count", "local", final=True))
    assert ghost.isVisible()
    assert not ghost.capsule
    assert ghost._font.pointSizeF() == 14.0
    metrics = QFontMetrics(ghost._font)
    indent = metrics.horizontalAdvance("total = ")
    # the first letter starts at the caret; the window begins where its line begins
    assert ghost.geometry().x() == CARET.x - indent
    assert ghost.width() == indent + metrics.horizontalAdvance("price * count")
    mask = ghost.mask()
    assert not mask.isEmpty()
    # only the letters: far less than the whole rectangle, nothing before the caret
    area = sum(r.width() * r.height() for r in mask)
    assert area < 0.6 * ghost.width() * ghost.height()
    assert mask.boundingRect().left() >= indent - 1


def test_a_capsule_below_the_caret_when_text_follows(qtbot: QtBot) -> None:
    ghost = GhostText()
    qtbot.addWidget(ghost)
    ghost.open_for(shown(after=" + tax"))
    ghost.show_text(PreviewText(1, "price * count", "local", final=True))
    assert ghost.capsule
    assert ghost.geometry().top() == CARET.y + CARET.height + CAPSULE_GAP
    assert ghost.geometry().left() == CARET.x
    assert ghost.mask().isEmpty()  # a whole rounded box, over nothing the user wrote


def test_the_first_lines_of_a_multi_line_suggestion(qtbot: QtBot) -> None:
    ghost = GhostText()
    qtbot.addWidget(ghost)
    ghost.open_for(shown(lines=3))
    ghost.show_text(PreviewText(1, "a\nb\nc\nd\ne", "local", final=True))
    assert ghost.lines == ["a", "b", "c" + MORE]


def test_no_caret_means_the_popup() -> None:
    assert not GhostText.fits(GhostText.__new__(GhostText), shown(caret=None))
    popup_style = PreviewShown(1, "x", CARET, "", "", False, style="popup")
    assert not GhostText.fits(GhostText.__new__(GhostText), popup_style)


def test_font_fallback_from_the_caret_height() -> None:
    font = app_font("", 0.0, 20)
    assert font.pixelSize() == 17

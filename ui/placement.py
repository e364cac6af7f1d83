"""Where the preview popup goes: below the caret (or the pointer), flipped above when it
would leave the screen at the bottom, and clamped to the screen the anchor is on."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize

CARET_GAP = 4
POINTER_GAP = 20
"""Below the pointer, clear of the arrow itself."""


def place(size: QSize, anchor: QRect, screen: QRect, *, at_pointer: bool) -> QPoint:
    """Top-left corner for a popup of ``size`` next to ``anchor`` (the caret rectangle, or
    a 1×1 rectangle at the pointer) inside ``screen`` (its available geometry)."""
    gap = POINTER_GAP if at_pointer else CARET_GAP
    x = anchor.left()
    y = anchor.bottom() + 1 + gap
    if y + size.height() > screen.bottom() + 1:
        above = anchor.top() - gap - size.height()
        y = above if above >= screen.top() else y
    x = min(max(x, screen.left()), screen.right() + 1 - size.width())
    y = min(max(y, screen.top()), screen.bottom() + 1 - size.height())
    return QPoint(max(x, screen.left()), max(y, screen.top()))

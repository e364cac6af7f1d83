"""Form rows bound to a key of the draft, each with its own error line underneath.

A :class:`Form` is a ``QFormLayout`` whose rows read and write keys relative to a base key
(``("backends", 2)`` on the backends page, ``("routing",)`` elsewhere). Number fields accept
any number on purpose: the models decide what is allowed, and say so next to the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from anyfill.ui.settings.draft import Draft, KeyPath, dotted
from anyfill.ui.settings.keynames import hotkey_label, readable_hotkeys
from anyfill.ui.settings.tips import tip_for

ERROR_STYLE = "color: #b3261e;"
HINT_STYLE = "color: palette(placeholder-text);"
BIG = 2_000_000_000
MAX_CHOICE_WIDTH = 320
"""The widest a choice box grows for its texts, in pixels (its popup list shows them all)."""
CHOICE_PADDING = 44
"""The box's frame, margins and arrow around its text."""


def _wrapping(label: QLabel) -> QLabel:
    """A word-wrapped label that takes the field's whole width (Qt would pick a narrow one)."""
    label.setWordWrap(True)
    policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    policy.setHeightForWidth(True)
    label.setSizePolicy(policy)
    return label


def error_label() -> QLabel:
    label = _wrapping(QLabel())
    label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    label.setStyleSheet(ERROR_STYLE)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.hide()
    return label


def hint_label(text: str) -> QLabel:
    label = _wrapping(QLabel(text))
    label.setStyleSheet(HINT_STYLE)
    return label


@dataclass
class Row:
    key: tuple[str, ...]
    editor: QWidget
    error: QLabel
    read: Callable[[Any], None]
    """Show a value from the draft in the editor (without writing it back)."""
    label: QLabel | None = None


class Form(QWidget):
    """Rows bound to ``base + key`` in the draft."""

    def __init__(
        self,
        draft: Draft,
        base: KeyPath | None = (),
        parent: QWidget | None = None,
        *,
        tips: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.draft = draft
        self.base: KeyPath | None = base
        self.tips = tips if tips is not None else ".".join(str(p) for p in base or ())
        """Where this form's options are in :data:`~anyfill.ui.settings.tips.TIPS`."""
        self.rows: list[Row] = []
        self.layout_ = QFormLayout(self)
        self.layout_.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        self.layout_.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        self._reading = False
        draft.changed.connect(self.show_problems)
        draft.reloaded.connect(self.refresh)

    # -- binding ----------------------------------------------------------------------

    def path(self, key: Sequence[str]) -> KeyPath | None:
        return None if self.base is None else (*self.base, *key)

    def set_base(self, base: KeyPath | None) -> None:
        self.base = base
        self.setEnabled(base is not None)
        self.refresh()

    def write(self, key: Sequence[str], value: Any) -> None:
        path = self.path(key)
        if path is None or self._reading:
            return
        self.draft.set(path, value)

    def refresh(self) -> None:
        if self.base is not None and not self._base_exists():
            # The draft was replaced (Revert) while a backend or rule added since was
            # selected: its page picks a new base right after; nothing to read here.
            return
        self._reading = True
        try:
            for row in self.rows:
                path = self.path(row.key)
                if path is not None:
                    row.read(self.draft.get(path))
        finally:
            self._reading = False
        self.show_problems()

    def _base_exists(self) -> bool:
        try:
            self.draft.get(self.base or ())
        except (IndexError, KeyError):
            return False
        return True

    def show_problems(self) -> None:
        for row in self.rows:
            path = self.path(row.key)
            message = ""
            if path is not None:
                found = self.draft.problems_under(path)
                message = found.get(dotted(path), "") or next(iter(found.values()), "")
            message = readable_hotkeys(message)
            if row.error.text() != message:
                row.error.setText(message)
                # Through the layout: a row it hid stays hidden to a plain setVisible, and
                # the label would then be drawn at the form's top-left corner.
                shown = bool(message) and row.editor.isVisibleTo(self)
                self.layout_.setRowVisible(row.error, shown)
        self._fit_errors()

    def _fit_errors(self) -> None:
        """Wrapped labels in a form get a height for the wrong width: size them for the
        width of the field they sit under."""
        for row in self.rows:
            if row.error.text():
                width = max(row.editor.width(), 160)
                row.error.setFixedHeight(row.error.heightForWidth(width))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_errors()

    def set_row_visible(self, key: Sequence[str], visible: bool) -> None:
        for row in self.rows:
            if row.key == tuple(key):
                self.layout_.setRowVisible(row.editor, visible)
                self.layout_.setRowVisible(row.error, visible and bool(row.error.text()))

    def _add(
        self,
        label: str,
        key: Sequence[str],
        editor: QWidget,
        read: Callable[[Any], None],
        tip: str = "",
    ) -> None:
        error = error_label()
        tip = tip or tip_for(self.tips, tuple(key))
        if tip:
            editor.setToolTip(tip)
        if label:
            title = QLabel(label)
            title.setBuddy(editor)
            title.setToolTip(tip)
            self.layout_.addRow(title, editor)
        else:
            title = None
            self.layout_.addRow(editor)
        self.layout_.addRow("", error)
        self.rows.append(Row(tuple(key), editor, error, read, title))

    def section(self, title: str) -> None:
        heading = QLabel(f"<b>{title}</b>")
        heading.setContentsMargins(0, 8, 0, 0)
        self.layout_.addRow(heading)

    def note(self, text: str) -> QLabel:
        label = hint_label(text)
        self.layout_.addRow(label)
        return label

    # -- field kinds --------------------------------------------------------------------

    def text(
        self,
        label: str,
        key: Sequence[str],
        *,
        placeholder: str = "",
        nullable: bool = False,
        tip: str = "",
    ) -> QLineEdit:
        edit = QLineEdit()
        edit.setPlaceholderText(placeholder)

        def changed(text: str) -> None:
            self.write(key, (text or None) if nullable else text)

        def read(value: object) -> None:
            edit.setText("" if value is None else str(value))
            edit.setCursorPosition(0)  # a long pattern shows its beginning

        edit.textEdited.connect(changed)
        self._add(label, key, edit, read, tip)
        return edit

    def text_list(
        self, label: str, key: Sequence[str], *, placeholder: str = "", tip: str = ""
    ) -> QLineEdit:
        """A list of strings written as ``a, b``."""
        edit = QLineEdit()
        edit.setPlaceholderText(placeholder)

        def changed(text: str) -> None:
            self.write(key, [part.strip() for part in text.split(",") if part.strip()])

        def read(value: list[str] | None) -> None:
            edit.setText(", ".join(value or []))
            edit.setCursorPosition(0)  # a long list shows its beginning, not its end

        edit.textEdited.connect(changed)
        self._add(label, key, edit, read, tip)
        return edit

    def integer(
        self, label: str, key: Sequence[str], *, suffix: str = "", tip: str = ""
    ) -> QSpinBox:
        spin = QSpinBox()
        spin.setRange(-BIG, BIG)
        spin.setSuffix(suffix)
        spin.setMinimumWidth(120)
        spin.valueChanged.connect(lambda value: self.write(key, int(value)))
        self._add(label, key, spin, lambda v: spin.setValue(int(v)), tip)
        return spin

    def number(
        self, label: str, key: Sequence[str], *, suffix: str = "", decimals: int = 2, tip: str = ""
    ) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setRange(-1e9, 1e9)
        spin.setDecimals(decimals)
        spin.setSuffix(suffix)
        spin.setMinimumWidth(120)
        spin.valueChanged.connect(lambda value: self.write(key, float(value)))
        self._add(label, key, spin, lambda v: spin.setValue(float(v)), tip)
        return spin

    def check(self, text: str, key: Sequence[str], *, tip: str = "") -> QCheckBox:
        box = QCheckBox(text)
        box.toggled.connect(lambda on: self.write(key, bool(on)))
        self._add("", key, box, lambda v: box.setChecked(bool(v)), tip)
        return box

    def choice(
        self,
        label: str,
        key: Sequence[str],
        options: Sequence[tuple[Any, str]],
        *,
        editable: bool = False,
        tip: str = "",
    ) -> QComboBox:
        combo = QComboBox()
        combo.setEditable(editable)
        # Wide enough for its longest choice (a cut "OpenAI-compatible /v1/compl" reads as
        # nothing), up to a bound so one long text cannot widen the form past the window.
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(12)
        longest = max((combo.fontMetrics().horizontalAdvance(t) for _, t in options), default=0)
        combo.setMinimumWidth(min(longest + CHOICE_PADDING, MAX_CHOICE_WIDTH))
        for value, text in options:
            combo.addItem(text, value)
            combo.setItemData(combo.count() - 1, text, Qt.ItemDataRole.ToolTipRole)
        if editable or max((len(text) for _, text in options), default=0) > 18:
            combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

        def picked(index: int) -> None:
            if index >= 0:
                self.write(key, combo.itemData(index))

        def read(value: Any) -> None:
            index = combo.findData(value)
            if index >= 0:
                combo.setCurrentIndex(index)
            elif editable:
                combo.setEditText("" if value is None else str(value))

        combo.activated.connect(picked)
        if editable:
            line = combo.lineEdit()
            assert line is not None
            line.textEdited.connect(lambda text: self.write(key, text))
        self._add(label, key, combo, read, tip)
        return combo

    def hotkey(
        self, label: str, key: Sequence[str], *, nullable: bool = False, tip: str = ""
    ) -> HotkeyEdit:
        edit = HotkeyEdit(nullable=nullable)
        edit.recorded.connect(lambda text: self.write(key, text or None if nullable else text))
        self._add(label, key, edit, lambda v: edit.show_value(v or ""), tip)
        return edit

    def key_list(self, label: str, key: Sequence[str], *, tip: str = "") -> KeyListEdit:
        """Several keys (the popup's accept keys): each recorded like a hotkey, shown as
        the desktop writes it, removed with its ✕."""
        widget = KeyListEdit()
        widget.edited.connect(lambda keys: self.write(key, keys))
        self._add(label, key, widget, lambda v: widget.show_value(list(v or [])), tip)
        return widget

    def ordered(
        self,
        label: str,
        key: Sequence[str],
        choices: Callable[[], Sequence[str]],
        *,
        nullable: bool = False,
        tip: str = "",
    ) -> OrderedChecklist:
        """A list of names in order (capture strategies, a backend chain): tick to use,
        drag or use the buttons to order."""
        widget = OrderedChecklist(choices)

        def changed(names: list[str]) -> None:
            self.write(key, (names or None) if nullable else names)

        widget.edited.connect(changed)
        self._add(label, key, widget, lambda v: widget.show_value(list(v or [])), tip)
        return widget


# -- widgets --------------------------------------------------------------------------

_QT_KEY_NAMES = {
    Qt.Key.Key_Space: "space",
    Qt.Key.Key_Return: "enter",
    Qt.Key.Key_Enter: "enter",
    Qt.Key.Key_Tab: "tab",
    Qt.Key.Key_Backspace: "backspace",
    Qt.Key.Key_Escape: "esc",
    Qt.Key.Key_Delete: "delete",
    Qt.Key.Key_Insert: "insert",
    Qt.Key.Key_Home: "home",
    Qt.Key.Key_End: "end",
    Qt.Key.Key_PageUp: "page_up",
    Qt.Key.Key_PageDown: "page_down",
    Qt.Key.Key_Left: "left",
    Qt.Key.Key_Right: "right",
    Qt.Key.Key_Up: "up",
    Qt.Key.Key_Down: "down",
}
_MODIFIER_KEYS = {
    Qt.Key.Key_Control,
    Qt.Key.Key_Shift,
    Qt.Key.Key_Alt,
    Qt.Key.Key_Meta,
    Qt.Key.Key_AltGr,
    Qt.Key.Key_Super_L,
    Qt.Key.Key_Super_R,
}


def hotkey_from_event(key: int, modifiers: Qt.KeyboardModifier) -> str | None:
    """``<ctrl>+<alt>+j`` for a key press; None for a lone modifier."""
    if key in _MODIFIER_KEYS:
        return None
    parts = []
    for flag, name in (
        (Qt.KeyboardModifier.ControlModifier, "ctrl"),
        (Qt.KeyboardModifier.ShiftModifier, "shift"),
        (Qt.KeyboardModifier.AltModifier, "alt"),
        (Qt.KeyboardModifier.MetaModifier, "cmd"),
    ):
        if modifiers & flag:
            parts.append(f"<{name}>")
    qt_key = Qt.Key(key)
    if qt_key in _QT_KEY_NAMES:
        parts.append(f"<{_QT_KEY_NAMES[qt_key]}>")
    elif Qt.Key.Key_F1 <= qt_key <= Qt.Key.Key_F24:
        parts.append(f"<f{key - Qt.Key.Key_F1.value + 1}>")
    elif 0x20 < key < 0x7F:
        parts.append(chr(key).lower())
    else:
        return None
    return "+".join(parts)


class HotkeyEdit(QPushButton):
    """Click, then press the combination. Esc while recording keeps the old one; with
    ``nullable``, Backspace clears it (the global setting applies)."""

    recorded = Signal(str)

    def __init__(self, *, nullable: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.value = ""
        self.nullable = nullable
        self.empty_text = "(the global setting)" if nullable else "(none)"
        """What the button says while no combination is set."""
        self.purpose = ""
        self.recording = False
        self.setCheckable(True)
        self.setMinimumWidth(220)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.toggled.connect(self._toggled)
        self._render()

    def show_value(self, value: str) -> None:
        self.value = value
        self._render()

    def _render(self) -> None:
        if self.recording:
            self.setText("Press the combination… (Esc: keep)")
        else:
            # Shown as the desktop writes it; the file keeps pynput's syntax (the tooltip).
            shown = hotkey_label(self.value) if self.value else ""
            self.setText(shown or self.empty_text)
            written = f"In the configuration file: {self.value}" if self.value else ""
            super().setToolTip("\n".join(part for part in (self.purpose, written) if part))

    def setToolTip(self, text: str) -> None:
        """What the combination is for; the tooltip adds how the file writes it."""
        self.purpose = text
        self._render()

    def _toggled(self, on: bool) -> None:
        self.recording = on
        if on:
            self.grabKeyboard()
        else:
            self.releaseKeyboard()
        self._render()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if not self.recording:
            super().keyPressEvent(event)
            return
        key = event.key()
        if key == Qt.Key.Key_Escape and not event.modifiers():
            self.setChecked(False)
            return
        if key == Qt.Key.Key_Backspace and not event.modifiers() and self.nullable:
            self.value = ""
            self.setChecked(False)
            self.recorded.emit("")
            return
        combination = hotkey_from_event(key, event.modifiers())
        if combination is None:
            return  # a modifier alone: wait for the key
        self.value = combination
        self.setChecked(False)
        self.recorded.emit(combination)


class KeyListEdit(QWidget):
    """A list of keys: one button per key (click it to record another key in its place),
    a ✕ to remove it, and "Add a key…" to record one more. ``edited`` carries the keys in
    the file's syntax (``<tab>``, ``<ctrl>+<enter>``)."""

    edited = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.keys: list[str] = []
        self.buttons: list[HotkeyEdit] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self.add_button = HotkeyEdit()
        self.add_button.setMinimumWidth(0)
        self.add_button.empty_text = "Add a key…"
        self.add_button.setAccessibleName("Add a key")
        self.add_button.recorded.connect(self._added)
        self._rebuild()

    def show_value(self, keys: list[str]) -> None:
        self.keys = list(keys)
        self._rebuild()

    def _rebuild(self) -> None:
        while self._row.count():
            item = self._row.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None and widget is not self.add_button:
                widget.deleteLater()
        self.buttons = []
        for index, key in enumerate(self.keys):
            edit = HotkeyEdit()
            edit.setMinimumWidth(0)
            edit.show_value(key)
            edit.recorded.connect(lambda text, i=index: self._replaced(i, text))
            remove = QPushButton("✕")
            remove.setFixedWidth(28)
            remove.setToolTip(f"Remove {hotkey_label(key)}")
            remove.setAccessibleName(f"Remove {hotkey_label(key)}")
            remove.setEnabled(len(self.keys) > 1)  # one key at least must insert
            remove.clicked.connect(lambda _=False, i=index: self._removed(i))
            self._row.addWidget(edit)
            self._row.addWidget(remove)
            self.buttons.append(edit)
        self.add_button.show_value("")
        self._row.addWidget(self.add_button)
        self._row.addStretch(1)

    def setToolTip(self, text: str) -> None:
        super().setToolTip(text)
        self.add_button.setToolTip(text)

    def _changed(self) -> None:
        self._rebuild()
        self.edited.emit(list(self.keys))

    def _added(self, key: str) -> None:
        if key and key not in self.keys:
            self.keys.append(key)
        self._changed()

    def _replaced(self, index: int, key: str) -> None:
        if key and key not in self.keys:
            self.keys[index] = key
        self._changed()

    def _removed(self, index: int) -> None:
        if len(self.keys) > 1:
            del self.keys[index]
        self._changed()


class RoomyRows(QStyledItemDelegate):
    """Rows taller than the font by ``extra`` pixels: a list reads (and is clicked) more
    easily, and the style still draws check boxes, icons and the selection its own way."""

    def __init__(self, extra: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.extra = extra

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        size = super().sizeHint(option, index)
        return QSize(size.width(), size.height() + self.extra)


def roomy(view: QAbstractItemView, extra: int = 8) -> None:
    """Give ``view`` comfortable rows (see :class:`RoomyRows`)."""
    view.setItemDelegate(RoomyRows(extra, view))


class OrderedChecklist(QWidget):
    """Checkable names in order; ``edited`` carries the ticked ones, in order."""

    edited = Signal(list)

    def __init__(self, choices: Callable[[], Sequence[str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._choices = choices
        self.list = QListWidget()
        self.list.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        roomy(self.list, 6)
        self.list.itemChanged.connect(lambda _: self._emit())
        model = self.list.model()
        model.rowsMoved.connect(lambda *_: self._emit())
        up = QPushButton("Up")
        down = QPushButton("Down")
        up.clicked.connect(lambda: self._move(-1))
        down.clicked.connect(lambda: self._move(+1))
        buttons = QVBoxLayout()
        buttons.addWidget(up)
        buttons.addWidget(down)
        buttons.addStretch()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list, 1, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(buttons)
        self._reading = False
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def show_value(self, names: list[str]) -> None:
        self._reading = True
        try:
            self.list.clear()
            rest = [name for name in self._choices() if name not in names]
            for name in [*names, *rest]:
                item = QListWidgetItem(name)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(
                    Qt.CheckState.Checked if name in names else Qt.CheckState.Unchecked
                )
                self.list.addItem(item)
        finally:
            self._reading = False
        # As tall as its rows (up to six), not a fixed box with empty space.
        rows = max(min(self.list.count(), 6), 2)
        row_height = (
            self.list.sizeHintForRow(0) if self.list.count() else self.fontMetrics().height() + 6
        )
        height = rows * row_height + 2 * self.list.frameWidth() + 2
        self.list.setFixedHeight(height)
        self.setFixedHeight(max(height, 64))  # room for the two buttons
        self.updateGeometry()

    def value(self) -> list[str]:
        items = [self.list.item(i) for i in range(self.list.count())]
        return [i.text() for i in items if i.checkState() == Qt.CheckState.Checked]

    def _move(self, step: int) -> None:
        row = self.list.currentRow()
        to = row + step
        if row < 0 or not 0 <= to < self.list.count():
            return
        item = self.list.takeItem(row)
        self.list.insertItem(to, item)
        self.list.setCurrentRow(to)
        self._emit()

    def _emit(self) -> None:
        if not self._reading:
            self.edited.emit(self.value())

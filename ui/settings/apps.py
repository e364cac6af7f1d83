"""Per-application rules: matched on the window class and/or a title pattern, first match
wins; each may turn anyfill off, change how text is read and inserted, or pick backends."""

from __future__ import annotations

import asyncio
import functools
import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from anyfill.daemon.x11.probe import WindowInfo, open_windows, pick_window
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.settings.capture import STRATEGIES
from anyfill.ui.settings.draft import Draft, empty_rule
from anyfill.ui.settings.fields import Form
from anyfill.ui.settings.keynames import hotkey_label

COLUMNS = ("Window class", "Title", "What applies")
MODES = (
    (None, "(the global setting)"),
    ("paste", "paste"),
    ("type", "type as key presses"),
    ("preview", "show a preview first"),
)
SUGGEST = ((None, "(the global setting)"), (True, "on"), (False, "off"))


def summary(rule: dict[str, object]) -> str:
    if rule.get("disabled"):
        return "anyfill is off"
    parts = []
    if rule.get("mode"):
        parts.append(dict(MODES).get(rule["mode"], str(rule["mode"])))  # type: ignore[call-overload]
    if rule.get("capture"):
        parts.append("capture: " + ", ".join(rule["capture"]))  # type: ignore[arg-type]
    # Keys as the Hotkeys page and the recorder show them (Ctrl+Shift+V), not the file's
    # <ctrl>+<shift>+v.
    if rule.get("paste_keys"):
        parts.append(f"paste with {hotkey_label(str(rule['paste_keys']))}")
    if rule.get("copy_keys"):
        parts.append(f"copy with {hotkey_label(str(rule['copy_keys']))}")
    if rule.get("suggest") is not None:
        parts.append("suggestions " + ("on" if rule["suggest"] else "off"))
    if rule.get("backends"):
        parts.append("backends: " + ", ".join(rule["backends"]))  # type: ignore[arg-type]
    return "; ".join(parts) or "(nothing changed)"


def exact(name: str) -> str:
    return f"^{re.escape(name)}$"


class AppsPage(QWidget):
    title = "Applications"

    def __init__(self, draft: Draft, bridge: CoreBridge | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.draft = draft
        self.bridge = bridge
        top = self._build_table()
        self.form = self._build_form()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.form)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(scroll)
        splitter.setChildrenCollapsible(False)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        draft.changed.connect(self._update_rows)
        draft.reloaded.connect(self.reload)
        self.reload()

    def _build_table(self) -> QWidget:
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        # One line a rule: a long pattern ends in "…" (the tooltip has it whole).
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 12)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(True)
        self.table.setColumnWidth(0, 220)
        self.table.setColumnWidth(1, 140)
        self.table.currentCellChanged.connect(lambda row, *_: self._select(row))

        add = QPushButton("Add")
        add.clicked.connect(lambda: self.add(None))
        # A push button with a menu: sized for its arrow, and alike its neighbours.
        self.pick = QPushButton("Pick a window")
        self.pick_menu = QMenu(self.pick)
        self.pick_menu.aboutToShow.connect(self._fill_pick_menu)
        self.pick.setMenu(self.pick_menu)
        remove = QPushButton("Remove")
        remove.clicked.connect(self.remove)
        up = QPushButton("Up")
        up.clicked.connect(lambda: self.move_rule(-1))
        down = QPushButton("Down")
        down.clicked.connect(lambda: self.move_rule(+1))
        buttons = QHBoxLayout()
        for button in (add, self.pick, remove, up, down):
            buttons.addWidget(button)
        buttons.addStretch()
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(QLabel("The first rule that matches the focused window applies:"))
        top_layout.addWidget(self.table, 1)
        top_layout.addLayout(buttons)
        self.status = QLabel("")
        top_layout.addWidget(self.status)
        return top

    def _build_form(self) -> Form:
        draft = self.draft
        form = Form(draft, None, tips="insert.apps")
        self.match = form.text(
            "Window class", ["match"], placeholder="regular expression, e.g. (?i)^firefox$"
        )
        self.title_edit = form.text(
            "Title", ["title"], placeholder="regular expression searched in the window title"
        )
        form.check("Turn anyfill off in these windows", ["disabled"])
        form.choice("Insert by", ["mode"], MODES)
        form.choice("Suggest as I type", ["suggest"], SUGGEST)
        form.hotkey("Paste keys", ["paste_keys"], nullable=True)
        form.hotkey("Copy keys", ["copy_keys"], nullable=True)
        form.ordered(
            "Capture",
            ["capture"],
            lambda: STRATEGIES,
            nullable=True,
            tip="None ticked: the global strategies",
        )
        form.ordered(
            "Backends",
            ["backends"],
            lambda: [b["name"] for b in draft.data["backends"]],
            nullable=True,
            tip="None ticked: routing.default",
        )
        form.note("Unticked lists and unset keys take the global settings.")
        return form

    @property
    def rules(self) -> list[dict[str, object]]:
        rules: list[dict[str, object]] = self.draft.data["insert"]["apps"]
        return rules

    def reload(self) -> None:
        row = max(self.table.currentRow(), 0)
        self.table.setRowCount(len(self.rules))
        self._update_rows()
        if self.rules:
            self.table.setCurrentCell(min(row, len(self.rules) - 1), 0)
        self._select(self.table.currentRow())

    def _update_rows(self) -> None:
        if self.table.rowCount() != len(self.rules):
            self.table.setRowCount(len(self.rules))
        for row, rule in enumerate(self.rules):
            values = (str(rule.get("match") or ""), str(rule.get("title") or ""), summary(rule))
            for column, value in enumerate(values):
                item = self.table.item(row, column)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, column, item)
                item.setText(value)
                item.setToolTip(value)
                bad = self.draft.problems_under(("insert", "apps", row))
                item.setForeground(Qt.GlobalColor.red if bad else self.palette().text())

    def _select(self, row: int) -> None:
        valid = 0 <= row < len(self.rules)
        self.form.set_base(("insert", "apps", row) if valid else None)

    def add(self, window: WindowInfo | None) -> None:
        rule = empty_rule()
        if window is not None:
            rule["match"] = exact(window.wm_class)
        # New rules go first: the first match wins, and a new rule is meant to apply.
        self.rules.insert(0, rule)
        self.draft.touch()
        self.reload()
        self.table.setCurrentCell(0, 0)
        if window is None:
            self.match.setFocus()

    def remove(self) -> None:
        row = self.table.currentRow()
        if 0 <= row < len(self.rules):
            del self.rules[row]
            self.draft.touch()
            self.reload()

    def move_rule(self, step: int) -> None:
        row = self.table.currentRow()
        to = row + step
        if 0 <= row < len(self.rules) and 0 <= to < len(self.rules):
            self.rules.insert(to, self.rules.pop(row))
            self.draft.touch()
            self.reload()
            self.table.setCurrentCell(to, 0)

    # -- picking a window ---------------------------------------------------------------

    def _fill_pick_menu(self) -> None:
        menu = self.pick_menu
        menu.clear()
        menu.addAction("Click a window…", self.pick_by_click)
        menu.addSeparator()
        windows = open_windows()
        own = {"anyfill", "Anyfill"}
        for window in windows:
            if window.wm_class in own:
                continue
            text = str(window)
            menu.addAction(text[:80], functools.partial(self.add, window))
        if not windows:
            action = menu.addAction("(no windows found on this display)")
            action.setEnabled(False)

    def pick_by_click(self) -> None:
        if self.bridge is None or not self.bridge.running:
            self.status.setText("the anyfill core is not running: pick from the list instead")
            return
        self.status.setText("Click the window the rule is for (right click: cancel)…")
        window = self.window()
        window.showMinimized()
        future = self.bridge.submit(asyncio.to_thread(pick_window))

        def done(picked: WindowInfo | None) -> None:
            window.showNormal()
            window.activateWindow()
            if picked is None:
                self.status.setText("No window was picked.")
                return
            self.status.setText(f"Picked {picked}.")
            self.add(picked)

        def failed(exc: BaseException) -> None:
            window.showNormal()
            self.status.setText(f"Picking failed: {exc}")

        self.bridge.then(future, done, failed)

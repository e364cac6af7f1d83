"""The settings window: a page list on the left, the page on the right, Save at the bottom.

Save is refused while any field is wrong (the first problem is named next to the button,
each one next to its field). Saving writes only the changed keys; a running anyfill sees the
new file and applies it at once (``anyfill.daemon.settings.reload``), and the window says so.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt
from PySide6.QtGui import QCloseEvent, QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QStackedWidget,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from anyfill.config.store import default_config_path
from anyfill.daemon.errors import AnyfillError
from anyfill.daemon.settings.reload import SettingsApplied, SettingsRejected
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.settings.advanced import AdvancedPage
from anyfill.ui.settings.apps import AppsPage
from anyfill.ui.settings.backends import BackendsPage
from anyfill.ui.settings.capture import CapturePage
from anyfill.ui.settings.context import ContextPage
from anyfill.ui.settings.draft import ChangedOnDisk, Draft, dotted, load_for_editing
from anyfill.ui.settings.fields import ERROR_STYLE, Form, roomy
from anyfill.ui.settings.hotkeys import HotkeysPage
from anyfill.ui.settings.keynames import readable_hotkeys
from anyfill.ui.settings.privacy import PrivacyPage
from anyfill.ui.settings.routing import RoutingPage
from anyfill.ui.settings.suggestions import SuggestionsPage

#: Each page's icon, from Qt's own set: the same on every desktop (icon themes differ in
#: which names they carry and mix full-colour with symbolic ones).
PAGE_ICONS: dict[type, QStyle.StandardPixmap] = {
    BackendsPage: QStyle.StandardPixmap.SP_DriveNetIcon,
    RoutingPage: QStyle.StandardPixmap.SP_BrowserReload,
    HotkeysPage: QStyle.StandardPixmap.SP_ComputerIcon,
    CapturePage: QStyle.StandardPixmap.SP_FileDialogContentsView,
    AppsPage: QStyle.StandardPixmap.SP_DesktopIcon,
    SuggestionsPage: QStyle.StandardPixmap.SP_MessageBoxInformation,
    PrivacyPage: QStyle.StandardPixmap.SP_DialogNoButton,
    ContextPage: QStyle.StandardPixmap.SP_FileDialogInfoView,
    AdvancedPage: QStyle.StandardPixmap.SP_FileDialogDetailedView,
}


def page_icon(style: QStyle, page: QWidget) -> QIcon:
    icon = style.standardIcon(PAGE_ICONS.get(type(page), QStyle.StandardPixmap.SP_FileIcon))
    # The selected row keeps the icon's own colours (the style's tint washes it out).
    for size in (16, 20, 24, 32):
        icon.addPixmap(icon.pixmap(size, size), QIcon.Mode.Selected)
    return icon


#: Where the window keeps its size and last page (Qt's settings, not anyfill's file).
UI_STATE = ("anyfill", "settings-window")


def daemon_running() -> bool:
    """Whether an anyfill answers on this user's control socket (it watches the file)."""
    from anyfill.daemon.control.client import call
    from anyfill.daemon.errors import ControlError

    try:
        call("ping", timeout_s=1.0)
    except ControlError:
        return False
    return True


class SettingsWindow(QWidget):
    """``SettingsWindow(bridge)``; ``bridge`` runs backend tests and reports reloads."""

    def __init__(
        self,
        bridge: CoreBridge | None,
        path: Path | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("anyfill settings[*]")
        self.bridge = bridge
        self.path = path or default_config_path()
        self.draft = Draft(self.path, load_for_editing(self.path), self)
        # Made first so that Tab goes from the page list into the page, then to the buttons.
        self.nav = QListWidget()
        self.nav.setAccessibleName("Pages")
        self.nav.setFixedWidth(190)
        self.nav.setIconSize(QSize(20, 20))
        roomy(self.nav, 14)
        self.pages: list[QWidget] = [
            BackendsPage(self.draft, bridge),
            RoutingPage(self.draft),
            HotkeysPage(self.draft),
            CapturePage(self.draft),
            AppsPage(self.draft, bridge),
            SuggestionsPage(self.draft),
            PrivacyPage(self.draft),
            ContextPage(self.draft),
            AdvancedPage(self.draft),
        ]
        self.stack = QStackedWidget()
        for page in self.pages:
            item = QListWidgetItem(page_icon(self.style(), page), str(getattr(page, "title", "")))
            self.nav.addItem(item)
            self.stack.addWidget(page)
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)

        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet(ERROR_STYLE)
        self.problem.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QDialogButtonBox()
        self.save_button = buttons.addButton(QDialogButtonBox.StandardButton.Save)
        self.revert_button = buttons.addButton("Revert", QDialogButtonBox.ButtonRole.ResetRole)
        self.close_button = buttons.addButton(QDialogButtonBox.StandardButton.Close)
        assert isinstance(self.save_button, QPushButton)
        self.save_button.clicked.connect(self.save)
        self.revert_button.clicked.connect(self.draft.revert)
        self.close_button.clicked.connect(self.close)
        QShortcut(QKeySequence.StandardKey.Save, self, self.save)
        bottom = QHBoxLayout()
        bottom.addWidget(self.problem, 1)
        bottom.addWidget(buttons)

        body = QHBoxLayout()
        body.addWidget(self.nav)
        body.addWidget(self.stack, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addLayout(bottom)

        self.draft.changed.connect(self.update_state)
        if bridge is not None:
            bridge.core_event.connect(self._core_event)
        self._restore_ui_state()
        self.update_state()

    # -- state ---------------------------------------------------------------------------

    def update_state(self) -> None:
        problems = self.draft.problems
        if problems:
            key, message = next(iter(problems.items()))
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            self.problem.setStyleSheet(ERROR_STYLE)
            message = readable_hotkeys(message)
            place = self.where(key) if key else ""
            self.problem.setText(f"{place}: {message}{more}" if place else message + more)
            self.problem.setToolTip(f"In the file: {key}" if key else "")
        elif self.draft.dirty:
            self.problem.setStyleSheet("")
            self.problem.setText("Unsaved changes.")
        elif not self.problem.text().startswith(("Saved", "Applied", "The running")):
            self.problem.setText("")
        self.save_button.setEnabled(not problems and self.draft.dirty)
        self.revert_button.setEnabled(self.draft.dirty)
        self.setWindowModified(self.draft.dirty)
        for row, page in enumerate(self.pages):
            item = self.nav.item(row)
            bad = any(self._page_has_problem(page, key) for key in problems)
            item.setForeground(Qt.GlobalColor.red if bad else self.palette().text())

    def where(self, key: str) -> str:
        """A problem's key as the user finds it: ``backends[1].url`` -> "Backends › codestral
        › URL"; the key itself when no page claims it."""
        page = next((p for p in self.pages if self._page_has_problem(p, key)), None)
        if page is None:
            return key
        parts = [str(getattr(page, "title", ""))]
        rest = ""
        item = re.match(r"(backends|insert\.apps)\[(\d+)\]\.?", key)
        if item is not None:
            rest = key[item.end() :]
            index = int(item.group(2))
            if item.group(1) == "backends":
                backends = self.draft.data.get("backends") or []
                name = backends[index].get("name") if index < len(backends) else None
                parts.append(str(name or f"backend {index + 1}"))
            else:
                parts.append(f"rule {index + 1}")
        label = self._field_label(page, key, rest)
        if label:
            parts.append(label)
        return " › ".join(parts)

    @staticmethod
    def _field_label(page: QWidget, key: str, rest: str) -> str:
        """The label of the form row that edits ``key`` on ``page`` (rows of a list item's
        form match on the part after the item, ``rest``)."""
        for form in page.findChildren(Form):
            base = dotted(form.base or ())
            for row in form.rows:
                field = ".".join(row.key)
                whole = f"{base}.{field}" if base else field
                if row.label is not None and (key == whole or (rest and rest == field)):
                    return row.label.text().strip()
        return ""

    @staticmethod
    def _page_has_problem(page: QWidget, key: str) -> bool:
        prefixes = {
            BackendsPage: ("backends",),
            RoutingPage: ("routing", ""),
            HotkeysPage: (
                "hotkeys",
                "ui.preview_accept",
                "ui.preview_dismiss",
                "ui.preview_next",
                "ui.preview_previous",
            ),
            CapturePage: (
                "capture",
                "insert.mode",
                "insert.type",
                "insert.restore",
                "insert.paste",
                "insert.copy",
            ),
            AppsPage: ("insert.apps",),
            SuggestionsPage: ("suggestions",),
            PrivacyPage: ("privacy",),
            AdvancedPage: ("logging", "ui.notifications", "ui.preview_font", "ui.history"),
        }
        for kind, starts in prefixes.items():
            if isinstance(page, kind):
                return any(key == s or (s and key.startswith(s)) for s in starts)
        return False

    def save(self) -> bool:
        if not self.save_button.isEnabled():
            return False
        try:
            self.draft.save()
        except ChangedOnDisk:
            if not self._overwrite_changed_file():
                return False
        except AnyfillError as exc:
            QMessageBox.critical(self, "Not saved", str(exc))
            return False
        self.problem.setStyleSheet("")
        self.problem.setText(
            "Saved. The running anyfill applies it at once."
            if daemon_running()
            else "Saved. anyfill uses it from its next start."
        )
        self.update_state()
        return True

    def _overwrite_changed_file(self) -> bool:
        """Another program changed the file meanwhile: overwrite it, or reload it."""
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "The file changed",
            f"Another program changed {self.path} since this window read it.",
            parent=self,
        )
        box.setInformativeText(
            "Save writes the settings shown here over it (its comments stay). Reload shows "
            "the file as it is now and drops the changes made here."
        )
        save = box.addButton(QMessageBox.StandardButton.Save)
        reload = box.addButton("Reload", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        clicked = box.clickedButton()
        try:
            if clicked is save:
                self.draft.save(overwrite=True)
                return True
            if clicked is reload:
                self.draft.reload_from_disk()
        except AnyfillError as exc:
            QMessageBox.critical(self, "Not saved", str(exc))
        return False

    def _core_event(self, event: object) -> None:
        if isinstance(event, SettingsApplied) and event.path == str(self.path):
            text = "Applied by the running anyfill."
            if event.notes:
                text += " " + readable_hotkeys(" ".join(event.notes))
            self.problem.setStyleSheet(ERROR_STYLE if event.notes else "")
            self.problem.setText(text)
        elif isinstance(event, SettingsRejected) and event.path == str(self.path):
            self.problem.setStyleSheet(ERROR_STYLE)
            self.problem.setText(
                "The running anyfill refused the file: "
                + readable_hotkeys("; ".join(event.problems))
            )

    # -- window ----------------------------------------------------------------------------

    def _restore_ui_state(self) -> None:
        state = QSettings(*UI_STATE)
        geometry = state.value("geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(960, 660)
        page = state.value("page", 0)
        row = int(page) if isinstance(page, int | str) and str(page).isdigit() else 0
        self.nav.setCurrentRow(min(max(row, 0), len(self.pages) - 1))

    def _keep_ui_state(self) -> None:
        state = QSettings(*UI_STATE)
        state.setValue("geometry", self.saveGeometry())
        state.setValue("page", self.nav.currentRow())

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.draft.dirty:
            answer = QMessageBox.question(
                self,
                "Unsaved changes",
                "Save the changes before closing?",
                QMessageBox.StandardButton.Save
                | QMessageBox.StandardButton.Discard
                | QMessageBox.StandardButton.Cancel,
            )
            if answer == QMessageBox.StandardButton.Cancel or (
                answer == QMessageBox.StandardButton.Save and not self.save()
            ):
                event.ignore()
                return
            if answer == QMessageBox.StandardButton.Discard:
                self.draft.revert()
        self._keep_ui_state()
        event.accept()

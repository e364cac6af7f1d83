"""Advanced: logging, where the files are, and starting over."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from anyfill.config.model import Settings
from anyfill.daemon.log import log_dir
from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import Form

LEVELS = (
    ("DEBUG", "debug (everything, for a bug report)"),
    ("INFO", "info"),
    ("WARNING", "warnings"),
    ("ERROR", "errors only"),
)


def _shown(path: Path) -> str:
    """The path as people write it: ``~/.config/anyfill/config.toml``."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


class AdvancedPage(QWidget):
    title = "Advanced"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.draft = draft
        form = Form(draft, ("logging",))
        form.choice("Log level", ["level"], LEVELS)
        form.check("Write a log file (rotated)", ["file"])
        folder = QPushButton("Open the log folder")
        folder.clicked.connect(self.open_logs)
        form.layout_.addRow("Log folder", folder)
        self.path = QLineEdit(_shown(draft.path))
        self.path.setReadOnly(True)
        self.path.setAccessibleName("Configuration file")
        open_file = QPushButton("Open")
        open_file.setToolTip("Open the file in your text editor; anyfill applies saved edits")
        open_file.clicked.connect(self.open_file)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(open_file)
        form.layout_.addRow("Configuration file", row)
        reset = QPushButton("Reset to defaults…")
        reset.clicked.connect(self.reset)
        form.layout_.addRow("", reset)
        form.note("Reset fills every page with the defaults; nothing changes until you Save.")
        self.form = form
        ui = Form(draft, ("ui",))
        ui.section("Tray and preview")
        ui.check(
            "Show notifications (a backend down, a key refused, a hotkey taken)", ["notifications"]
        )
        ui.integer("Preview font size", ["preview_font_size"], suffix=" pt")
        ui.integer(
            "History",
            ["history_size"],
            suffix=" completions",
            tip="How many recent completions the tray keeps",
        )
        layout = QVBoxLayout(self)
        layout.addWidget(form)
        layout.addWidget(ui)
        layout.addStretch()
        form.refresh()
        ui.refresh()

    def open_logs(self) -> None:
        directory = log_dir()
        directory.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(directory)))

    def open_file(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.draft.path)))

    def reset(self) -> None:
        answer = QMessageBox.question(
            self,
            "Reset to defaults",
            "Put every setting back to its default? Nothing is written until you Save.",
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.draft.replace(Settings())

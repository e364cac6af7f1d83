"""The `anyfill doctor` findings in a window, each with its fix, refreshed on demand.

The checks run on a thread of their own with their own event loop, never on the core's: the
doctor asks the control socket whether the daemon answers, and that socket is served by the
core's loop, so checks running there would block the very answer they wait for (they always
read "did not answer within 2 s")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import logging
from pathlib import Path

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from anyfill.daemon.doctor.checks import Finding, diagnose
from anyfill.daemon.doctor.report import EXIT_FAILURE, EXIT_OK, verdict_line
from anyfill.ui.bridge import CoreBridge

log = logging.getLogger("anyfill.ui.diagnostics")
_worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="anyfill-doctor")
_MARKS = {"ok": ("✓", "#15803d"), "warn": ("!", "#b45309"), "fail": ("✗", "#dc2626")}
PREFERRED_SIZE = (900, 620)
"""What the findings need to be read without scrolling on a usual screen; a smaller
screen gets at most 90 % of its free area and a scroll bar."""


def findings_html(findings: list[Finding]) -> str:
    rows = []
    for finding in findings:
        mark, colour = _MARKS[finding.status]
        rows.append(
            f'<tr><td style="color:{colour}; font-weight:bold; padding-right:8px">{mark}</td>'
            f'<td style="padding-right:12px"><b>{html.escape(finding.topic)}</b></td>'
            f"<td>{html.escape(finding.detail)}</td></tr>"
        )
    return f"<table cellspacing='4'>{''.join(rows)}</table>"


def verdict_of(findings: list[Finding]) -> Finding:
    """The doctor's own verdict line for these findings (as `anyfill doctor` prints it)."""
    failed = any(finding.status == "fail" for finding in findings)
    verdict = verdict_line(findings, EXIT_FAILURE if failed else EXIT_OK)
    # The window shows the verdict first, the lines it sums up under it.
    return Finding(verdict.status, verdict.topic, verdict.detail.replace(" above", " below"))


def fitted(available: QRect, preferred: tuple[int, int] = PREFERRED_SIZE) -> QRect:
    """The window's place: its preferred size, never more than 90 % of the screen's free
    area, centred on it, so no part of it starts off-screen."""
    width = min(preferred[0], int(available.width() * 0.9))
    height = min(preferred[1], int(available.height() * 0.9))
    left = available.left() + (available.width() - width) // 2
    top = available.top() + (available.height() - height) // 2
    return QRect(left, top, width, height)


class DiagnosticsWindow(QWidget):
    def __init__(self, bridge: CoreBridge, config_path: Path) -> None:
        super().__init__()
        self.setWindowTitle("anyfill diagnostics")
        self._bridge = bridge
        self._config_path = config_path
        self.findings: list[Finding] = []
        self.verdict = QLabel("Checking…")
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setWordWrap(True)
        self._report = QLabel()
        self._report.setTextFormat(Qt.TextFormat.RichText)
        self._report.setWordWrap(True)
        self._report.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self._report.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setWidget(self._report)
        again = QPushButton("Check again")
        again.clicked.connect(self.run_checks)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(again)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.verdict)
        layout.addWidget(self.scroll_area, 1)
        layout.addLayout(buttons)
        self.fit_to_screen()

    def fit_to_screen(self) -> None:
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is not None:
            self.setGeometry(fitted(screen.availableGeometry()))

    def run_checks(self) -> None:
        """Run the doctor off the core loop (see the module's docstring) and off the GUI."""
        self.verdict.setText("Checking…")
        self._report.setText("")
        future = _worker.submit(asyncio.run, diagnose(self._bridge.settings, self._config_path))
        self._bridge.then(future, self._show, self._failed)

    def _show(self, findings: list[Finding]) -> None:
        self.findings = findings
        verdict = verdict_of(findings)
        mark, colour = _MARKS[verdict.status]
        self.verdict.setText(
            f'<b style="color:{colour}">{mark} {html.escape(verdict.detail, quote=False)}</b>'
        )
        self._report.setText(findings_html(findings))
        self._fit_height()
        # For a bug report (and the tests): the verdict and each line, never captured text.
        log.info("diagnostics: %s", verdict.detail)
        for finding in findings:
            log.info("diagnostics: %s %s: %s", finding.status, finding.topic, finding.detail)

    def _fit_height(self) -> None:
        """As tall as the findings need, within the screen (they scroll beyond that)."""
        room = fitted((self.screen() or QGuiApplication.primaryScreen()).availableGeometry())
        layout = self.layout()
        chrome = self.height() - self.scroll_area.viewport().height()
        wanted = self._report.heightForWidth(self.scroll_area.viewport().width()) + chrome
        if layout is not None:
            wanted += layout.spacing()
        height = max(min(wanted, room.height()), 240)
        self.setGeometry(
            room.left(), room.top() + (room.height() - height) // 2, room.width(), height
        )

    def _failed(self, error: BaseException) -> None:
        self.verdict.setText(f"The checks could not run: {html.escape(str(error))}")

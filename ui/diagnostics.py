"""The `anyfill doctor` findings in a window, each with its fix, refreshed on demand."""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from anyfill.daemon.doctor.checks import Finding, diagnose
from anyfill.ui.bridge import CoreBridge

_worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="anyfill-doctor")
_MARKS = {"ok": ("✓", "#15803d"), "warn": ("!", "#b45309"), "fail": ("✗", "#dc2626")}


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


class DiagnosticsWindow(QWidget):
    def __init__(self, bridge: CoreBridge, config_path: Path) -> None:
        super().__init__()
        self.setWindowTitle("anyfill diagnostics")
        self._bridge = bridge
        self._config_path = config_path
        self.findings: list[Finding] = []
        self._report = QLabel("Checking…")
        self._report.setTextFormat(Qt.TextFormat.RichText)
        self._report.setWordWrap(True)
        self._report.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        again = QPushButton("Check again")
        again.clicked.connect(self.run_checks)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(again)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self._report, 1)
        layout.addLayout(buttons)
        self.resize(640, 320)

    def run_checks(self) -> None:
        """Run the doctor on the core loop (backends are asked over the network)."""
        self._report.setText("Checking…")
        checks = diagnose(self._bridge.settings, self._config_path)
        if self._bridge.running:
            future = self._bridge.submit(checks)
        else:  # the core could not start (no display...): the checks say why, off the GUI
            future = _worker.submit(asyncio.run, checks)
        self._bridge.then(future, self._show, self._failed)

    def _show(self, findings: list[Finding]) -> None:
        self.findings = findings
        self._report.setText(findings_html(findings))

    def _failed(self, error: BaseException) -> None:
        self._report.setText(f"The checks could not run: {html.escape(str(error))}")

"""Python's cyclic garbage collector runs only on the GUI thread while Qt and the core share
the process.

The collector runs in whichever thread happens to allocate when a threshold is crossed: the
core's asyncio thread, or a download's worker thread. A Qt object in a reference cycle (a
tray, a dialog, a timer whose Python side holds bound methods) is then deleted off the GUI
thread while the GUI thread paints or dispatches, and the process aborts or segfaults: the
test suite's SIGABRT in the download dialog's cancel test, where the worker thread writing
the model allocated while an earlier tray's cycle was garbage. So once a core thread is
started, automatic collection is off and a timer on the GUI thread collects instead, with
the same generation thresholds (the approach of calibre's and pyqtgraph's
GarbageCollector). Explicit ``gc.collect()`` calls elsewhere are not affected.
"""

from __future__ import annotations

import gc
import logging
import threading

from PySide6.QtCore import QCoreApplication, QObject, QTimer

log = logging.getLogger("anyfill.ui.gc")

INTERVAL_MS = 100
"""How often the GUI thread looks whether a generation is due."""


class GuiThreadCollector(QObject):
    """Collects on the GUI thread per gc's thresholds; automatic collection is off while
    it lives (it is a child of the application, so it lives as long as the application)."""

    def __init__(self, app: QCoreApplication) -> None:
        super().__init__(app)
        self.setObjectName("anyfill-gc-guard")
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.disable()
        gc.collect()  # what is garbage already goes now, on this thread
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.collect_due)
        self._timer.start(INTERVAL_MS)
        self.destroyed.connect(_reenable if self._was_enabled else _nothing)

    def collect_due(self) -> None:
        counts = gc.get_count()
        due = [g for g in range(3) if counts[g] > self._thresholds[g]]
        if due:
            gc.collect(max(due))


def _reenable() -> None:
    gc.enable()


def _nothing() -> None:
    pass


def collect_on_gui_thread() -> None:
    """Install the collector on the running application (once); call on the GUI thread
    before starting a thread that shares Qt's process."""
    app = QCoreApplication.instance()
    if app is None or threading.current_thread() is not threading.main_thread():
        return
    if app.findChild(GuiThreadCollector, "anyfill-gc-guard") is None:
        GuiThreadCollector(app)
        log.debug("cyclic garbage is collected on the GUI thread from now on")

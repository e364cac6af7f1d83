"""The managed llama-server in the tray: what is missing and its fix, and the download of
the default FIM model, asked first (size and folder) and shown with a progress dialog.

The download runs in the core (``Core.download_model`` through the bridge); its
``ModelDownload`` events feed the bar. Cancel stops it and keeps the ``.part`` file, so
the next download resumes; once the file is verified the core starts the server itself.
"""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QMessageBox, QProgressDialog, QWidget

from anyfill.daemon.bus.status import Problem
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.models.catalog import human_size
from anyfill.daemon.models.download import ModelDownload
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.notify import Notifier

log = logging.getLogger("anyfill.ui.managed")

UNIT = 1024
"""The bar counts KiB: a QProgressDialog holds an int, a model can pass 2 GiB."""


def problem_of_server(event: ManagedServerChanged, *, menu: bool = True) -> Problem | None:
    """The notification a missing binary or model deserves (once per backend and kind).
    ``menu``: the tray icon shows, so its menu can be named."""
    if event.state == "missing_binary":
        return Problem(
            f"managed_binary:{event.backend}",
            f"anyfill cannot start its llama.cpp server: {event.detail}.",
            f"Fix: {event.fix}",
        )
    if event.state == "missing_model":
        offer = ""
        if event.model_size and menu:
            offer = " Or choose 'Download the FIM model…' in the tray menu."
        return Problem(
            f"managed_model:{event.backend}",
            f"anyfill cannot start its llama.cpp server: {event.detail}.",
            f"Fix: {event.fix}.{offer}",
        )
    return None


def short_folder(folder: str) -> str:
    """``folder`` with the home directory written ``~`` (shorter, and what users read)."""
    path, home = Path(folder), Path.home()
    if path.is_relative_to(home):
        return str(Path("~") / path.relative_to(home))
    return folder


def download_label(event: ManagedServerChanged) -> str:
    """The menu item: what is downloaded, how big, and where to."""
    size = human_size(event.model_size)
    return f"Download the FIM model {event.model} ({size}, to {short_folder(event.model_dir)})…"


class ModelDownloads(QObject):
    """Asks before a download, runs it through the bridge and shows its progress."""

    def __init__(self, bridge: CoreBridge, notifier: Notifier) -> None:
        super().__init__()
        self._bridge = bridge
        self._notifier = notifier
        self.ask_box: QMessageBox | None = None
        """The open "download?" question, if any."""
        self._retired: list[QMessageBox] = []
        """Questions just answered, kept until the event loop is back (see _answered)."""
        self.progress: QProgressDialog | None = None
        """The open progress dialog, if any."""
        self.error_box: QMessageBox | None = None
        """Why the last download failed."""
        self.running: concurrent.futures.Future[Path] | None = None
        self._model = ""
        self._folder = ""
        self.finished: list[tuple[str, str]] = []
        """(model, 'done'|'cancelled'|'failed: why') of every download that ended."""

    # -- asking ----------------------------------------------------------------------

    def offer(self, event: ManagedServerChanged, parent: QWidget | None = None) -> None:
        """Ask whether to download ``event``'s model; a Yes starts the download."""
        if self.running is not None and not self.running.done():
            if self.progress is not None:
                self.progress.raise_()
            return
        if self.ask_box is not None:
            self.ask_box.raise_()
            return
        box = QMessageBox(parent)
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("anyfill: download the FIM model?")
        box.setText(f"Download the code completion model {event.model}?")
        box.setInformativeText(
            f"Size: {human_size(event.model_size)}\n"
            f"Folder: {short_folder(event.model_dir)}\n\n"
            "anyfill's own llama.cpp server then runs it on this computer, so completions "
            "work without any other server. An interrupted download resumes where it "
            "stopped; the file's checksum is verified before it is used."
        )
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
        box.setDefaultButton(QMessageBox.StandardButton.Yes)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.finished.connect(lambda result: self._answered(event, result))
        self.ask_box = box
        box.open()  # not exec(): the core's events keep flowing while the user reads

    def _answered(self, event: ManagedServerChanged, result: int) -> None:
        # The box is still inside its own close (or the application's quit closing it):
        # keep it alive until the event loop is back, or dropping the last reference would
        # delete it under Qt's feet (a SIGSEGV on SIGTERM with the question open).
        closing, self.ask_box = self.ask_box, None
        if closing is not None:
            self._retired.append(closing)
            QTimer.singleShot(0, self._retired.clear)
        if result != QMessageBox.StandardButton.Yes:
            log.info("download of %s declined", event.model)
            return
        self.start(event)

    # -- downloading -----------------------------------------------------------------

    def start(self, event: ManagedServerChanged) -> None:
        self._model = event.model
        self._folder = short_folder(event.model_dir)
        dialog = QProgressDialog(
            f"Downloading {event.model} to {self._folder}…",
            "Cancel",
            0,
            max(event.model_size // UNIT, 1),
        )
        dialog.setWindowTitle("anyfill: downloading the FIM model")
        dialog.setMinimumDuration(0)
        dialog.setAutoClose(False)
        dialog.setAutoReset(False)
        dialog.setMinimumWidth(460)
        dialog.setValue(0)
        dialog.canceled.connect(self.cancel)
        self.progress = dialog
        dialog.show()
        log.info("downloading %s to %s", event.model, event.model_dir)
        future = self._bridge.download_model(event.backend)
        self.running = future
        self._bridge.then(future, self._done, self._failed)

    def cancel(self) -> None:
        """Stop the download (the partial file stays for a resume) and close the dialog."""
        future = self.running
        if future is not None and not future.done():
            future.cancel()
            self.finished.append((self._model, "cancelled"))
            log.info("download of %s cancelled; the partial file is kept", self._model)
        self._close()

    def on_event(self, event: ModelDownload) -> None:
        dialog = self.progress
        if dialog is None or event.model != self._model or event.state != "running":
            return
        if event.total:
            dialog.setMaximum(max(event.total // UNIT, 1))
        dialog.setValue(event.done // UNIT)
        dialog.setLabelText(
            f"Downloading {event.model} to {self._folder}\n"
            f"{human_size(event.done)} of {human_size(event.total)}"
        )

    def _done(self, path: Path) -> None:
        self.finished.append((self._model, "done"))
        self._close()
        self._notifier.notify(
            "anyfill: model downloaded",
            f"{path.name} is verified; anyfill's llama.cpp server starts with it now.",
        )

    def _failed(self, error: BaseException) -> None:
        if isinstance(error, concurrent.futures.CancelledError):
            return
        self.finished.append((self._model, f"failed: {error}"))
        self._close()
        log.warning("download of %s failed: %s", self._model, error)
        box = QMessageBox(QMessageBox.Icon.Warning, "anyfill: the download failed", str(error))
        box.setInformativeText("Choose 'Download the FIM model…' in the tray menu to try again.")
        self.error_box = box  # a parentless dialog lives as long as a Python reference
        box.open()

    def _close(self) -> None:
        dialog, self.progress = self.progress, None
        self.running = None
        if dialog is not None:
            dialog.canceled.disconnect(self.cancel)
            dialog.close()
            dialog.deleteLater()

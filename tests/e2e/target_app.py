"""A text field to complete into: a PySide6 QPlainTextEdit run as its own process.

The test drives it over a local socket, one JSON object per line:
``{"cmd": "state"}`` -> text, caret, anchor, clipboard and PRIMARY as the app sees them;
``{"cmd": "set", "text": ..., "caret": ...}`` -> replace the document, place the caret;
``{"cmd": "copy_rich", "text": ..., "html": ...}`` -> put several formats on the clipboard;
``{"cmd": "stall", "key": "Key_End", "ms": 300}`` -> freeze once on that key (load);
``{"cmd": "changed"}`` -> ``time.monotonic()`` of the last text change (the clock is
system-wide, so a benchmark can compare it with its own); ``{"cmd": "quit"}``.
The first line it answers is ``{"wid": <X window id>}``.

Usage: python -m tests.e2e.target_app SOCKET_PATH [CLASS_NAME] [--password]
(``--password``: a single password field, QLineEdit in Password echo mode, instead.)
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from PySide6.QtCore import QEvent, QMimeData, QObject, Qt
from PySide6.QtGui import QClipboard, QGuiApplication
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QApplication, QLineEdit, QPlainTextEdit, QVBoxLayout, QWidget


class KeyLog(QObject):
    """Every key press the editor receives, as 'ctrl+alt+Key_Space'-like strings."""

    def __init__(self) -> None:
        super().__init__()
        self.presses: list[str] = []
        self.stall: tuple[str, float] | None = None
        """(key name, seconds): freeze once on that key, like an app under heavy load."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.KeyPress:
            mods = event.modifiers()  # type: ignore[attr-defined]
            names = [
                name
                for name, flag in (
                    ("ctrl", Qt.KeyboardModifier.ControlModifier),
                    ("alt", Qt.KeyboardModifier.AltModifier),
                    ("shift", Qt.KeyboardModifier.ShiftModifier),
                )
                if mods & flag
            ]
            key = Qt.Key(event.key()).name  # type: ignore[attr-defined]
            self.presses.append("+".join([*names, key]))
            if self.stall is not None and self.stall[0] == key:
                time.sleep(self.stall[1])
                self.stall = None
        return False


class PasswordField(QLineEdit):
    """The QPlainTextEdit calls the target uses, on a password line edit."""

    def __init__(self) -> None:
        super().__init__()
        self.setEchoMode(QLineEdit.EchoMode.Password)

    def setPlainText(self, text: str) -> None:
        self.setText(text)

    def toPlainText(self) -> str:
        return self.text()

    def textCursor(self) -> PasswordField:
        return self

    def setTextCursor(self, cursor: PasswordField) -> None:
        pass

    def setPosition(self, position: int) -> None:
        self.setCursorPosition(position)

    def position(self) -> int:
        return self.cursorPosition()

    def anchor(self) -> int:
        return self.selectionStart() if self.hasSelectedText() else self.cursorPosition()


class Target:
    def __init__(
        self, socket_path: str, app: QApplication, password: bool = False, fields: bool = False
    ) -> None:
        self.app = app
        self.keys = KeyLog()
        self.editor: Any = PasswordField() if password else QPlainTextEdit()
        self.editor.installEventFilter(self.keys)
        self.changed_at = 0.0
        self.editor.textChanged.connect(self._on_change)
        # --fields: the editor in a form with a subject line and a PIN (password) line, the
        # other text fields of the window that the context sources read.
        self.window: Any = self.editor
        if fields:
            self.window = QWidget()
            layout = QVBoxLayout(self.window)
            subject = QLineEdit("Launch plan for Friday")
            subject.setAccessibleName("Subject")
            pin = QLineEdit("hunter2")
            pin.setEchoMode(QLineEdit.EchoMode.Password)
            pin.setAccessibleName("PIN")
            for widget in (subject, pin, self.editor):
                layout.addWidget(widget)
        self.window.setWindowTitle("anyfill e2e target")
        self.window.resize(600, 300)
        self.window.show()
        self.editor.setFocus()
        self.server = QLocalServer()
        QLocalServer.removeServer(socket_path)
        if not self.server.listen(socket_path):
            raise SystemExit(f"cannot listen on {socket_path}")
        self.server.newConnection.connect(self._accept)
        self._buffers: dict[QLocalSocket, bytes] = {}

    def _on_change(self) -> None:
        self.changed_at = time.monotonic()

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            conn = self.server.nextPendingConnection()
            self._buffers[conn] = b""
            conn.readyRead.connect(lambda c=conn: self._read(c))
            self._send(conn, {"wid": int(self.window.winId())})

    def _read(self, conn: QLocalSocket) -> None:
        self._buffers[conn] += bytes(conn.readAll().data())
        while b"\n" in self._buffers[conn]:
            line, _, rest = self._buffers[conn].partition(b"\n")
            self._buffers[conn] = rest
            self._send(conn, self.handle(json.loads(line)))

    @staticmethod
    def _send(conn: QLocalSocket, obj: dict[str, Any]) -> None:
        conn.write(json.dumps(obj).encode() + b"\n")
        conn.flush()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request["cmd"]
        if cmd == "set":
            self.editor.setPlainText(request["text"])
            cursor = self.editor.textCursor()
            cursor.setPosition(request["caret"])
            self.editor.setTextCursor(cursor)
            self.keys.presses.clear()
            return {"ok": True}
        if cmd == "copy_rich":
            mime = QMimeData()
            mime.setText(request["text"])
            mime.setHtml(request["html"])
            mime.setData("application/x-anyfill-test", request["text"].encode()[::-1])
            QGuiApplication.clipboard().setMimeData(mime, QClipboard.Mode.Clipboard)
            return {"ok": True}
        if cmd == "stall":
            self.keys.stall = (request["key"], request["ms"] / 1000)
            return {"ok": True}
        if cmd == "changed":
            return {"at": self.changed_at, "text": self.editor.toPlainText()}
        if cmd == "quit":
            self.app.quit()
            return {"ok": True}
        cursor = self.editor.textCursor()
        clipboard = QGuiApplication.clipboard()
        return {
            "text": self.editor.toPlainText(),
            "caret": cursor.position(),
            "anchor": cursor.anchor(),
            "selected": cursor.selectedText(),
            "focused": self.editor.hasFocus(),
            "keys": self.keys.presses,
            "clipboard": clipboard.text(QClipboard.Mode.Clipboard),
            "primary": clipboard.text(QClipboard.Mode.Selection),
        }


def main() -> None:
    app = QApplication([sys.argv[0]])
    names = [arg for arg in sys.argv[2:] if not arg.startswith("--")]
    app.setApplicationName(names[0] if names else "anyfill-target")
    target = Target(  # noqa: F841 - lives as long as the loop
        sys.argv[1], app, password="--password" in sys.argv, fields="--fields" in sys.argv
    )
    sys.exit(app.exec())


if __name__ == "__main__":
    main()

"""Capture and insert: how the text around the caret is read, and how the answer goes in."""

from __future__ import annotations

from PySide6.QtWidgets import QScrollArea, QVBoxLayout, QWidget

from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import Form

STRATEGIES = ("accessibility", "keyboard", "clipboard")
MODES = (
    ("paste", "paste (your clipboard is kept)"),
    ("type", "type as key presses"),
    ("preview", "show a preview first"),
)


class CapturePage(QWidget):
    title = "Capture and insert"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        capture = Form(draft, ("capture",))
        capture.section("Reading the text around the caret")
        capture.ordered(
            "Strategies",
            ["strategies"],
            lambda: STRATEGIES,
            tip="Tried in order until one answers",
        )
        capture.note(
            "accessibility: asks the application (AT-SPI); keyboard: selects and copies, then "
            "puts the caret back; clipboard: you copy text holding the cursor marker."
        )
        capture.choice(
            "Keyboard selects to",
            ["scope"],
            [("document", "the document's edges"), ("line", "the line's edges")],
        )
        capture.integer("Text before the caret", ["max_prefix_chars"], suffix=" chars")
        capture.integer("Text after the caret", ["max_suffix_chars"], suffix=" chars")
        capture.integer("Wait for the application to copy", ["copy_timeout_ms"], suffix=" ms")
        capture.integer("Nothing selected: stop waiting after", ["empty_timeout_ms"], suffix=" ms")
        capture.text("Cursor marker", ["cursor_marker"])

        insert = Form(draft, ("insert",))
        insert.section("Inserting the answer")
        insert.choice("Insert by", ["mode"], MODES)
        insert.integer(
            "Type short answers up to",
            ["type_max_chars"],
            suffix=" chars",
            tip="ASCII answers up to this length are typed instead of pasted (0: never)",
        )
        insert.check("Put the clipboard back after pasting", ["restore_clipboard"])
        insert.hotkey("Paste keys", ["paste_keys"])
        insert.hotkey("Copy keys", ["copy_keys"])
        insert.integer(
            "Put the clipboard back at the latest after", ["restore_timeout_ms"], suffix=" ms"
        )
        completion = Form(draft, ("completion",))
        completion.section("The request")
        completion.choice(
            "One line only",
            ["single_line"],
            [
                ("auto", "when text follows the caret"),
                ("always", "always"),
                ("never", "never"),
            ],
        )
        completion.integer("Send at most, before", ["max_prefix_chars"], suffix=" chars")
        completion.integer("and after the caret", ["max_suffix_chars"], suffix=" chars")
        body = QWidget()
        inner = QVBoxLayout(body)
        inner.addWidget(capture)
        inner.addWidget(insert)
        inner.addWidget(completion)
        inner.addStretch()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        self.forms = (capture, insert, completion)
        for form in self.forms:
            # One label column for the three sections, so their fields line up.
            for row in form.rows:
                if row.label is not None:
                    row.label.setMinimumWidth(250)
            form.refresh()

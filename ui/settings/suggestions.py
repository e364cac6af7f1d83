"""Suggestions as you type: off by default; when on, which apps, how they show, which
backends may be asked without a key press."""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import Form

SCREEN_READER_NOTE = (
    "While this is on, anyfill listens to the focused application's accessibility text "
    "events. Registering that listener switches some Qt applications into their "
    "screen-reader mode (a little slower, on until they restart)."
)


class SuggestionsPage(QWidget):
    title = "Suggestions"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = Form(draft, ("suggestions",))
        self.auto = form.check("Suggest as I type", ["auto"])
        self.note = form.note(SCREEN_READER_NOTE)
        self.show_as = form.choice(
            "Show suggestions as",
            ["style"],
            (
                (None, "ghost text as I type, the popup for the hotkey"),
                ("ghost", "ghost text (dimmed, at the caret)"),
                ("popup", "the preview popup"),
            ),
        )
        self.pause = form.integer(
            "Pause before asking",
            ["pause_ms"],
            suffix=" ms",
        )
        self.chain = form.ordered(
            "Backends",
            ["backends"],
            lambda: [b["name"] for b in draft.data["backends"]],
            nullable=True,
        )
        self.cloud = form.check(
            "Also ask cloud backends automatically",
            ["cloud_auto"],
        )
        form.note(
            "Off: suggestions as you type only ask local servers; the hotkeys still use "
            "every backend of their chain. Terminals and password managers get no "
            "suggestions (their rules on the Applications page)."
        )
        self.after = form.integer(
            "Text after the caret",
            ["max_chars_after_caret"],
            suffix=" characters at most",
        )
        self.lines = form.integer("Lines shown", ["ghost_lines"])
        self.form = form
        layout = QVBoxLayout(self)
        layout.addWidget(form)
        layout.addStretch()
        form.refresh()

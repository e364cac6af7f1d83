"""Privacy: what may leave the text field, and where anyfill never works."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from anyfill.ui.settings.draft import Draft, empty_rule
from anyfill.ui.settings.fields import Form, hint_label, roomy


class PrivacyPage(QWidget):
    title = "Privacy"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.draft = draft
        form = Form(draft, ("privacy",))
        form.check("Write captured text and completions to the log", ["log_text"])
        form.check("Send captured text in MQTT events", ["mqtt_text"])
        form.note(
            "Both are off unless you turn them on: logs and MQTT events then carry "
            "lengths, never the text itself."
        )
        self.form = form
        self.denylist = QListWidget()
        roomy(self.denylist, 6)
        self.denylist.setAccessibleName("Applications anyfill never reads or types into")
        add = QPushButton("Add…")
        add.clicked.connect(self.add)
        remove = QPushButton("Remove")
        remove.clicked.connect(self.remove)
        buttons = QHBoxLayout()
        buttons.addWidget(add)
        buttons.addWidget(remove)
        buttons.addStretch()
        # Laid out with the form's margins, so that the heading and the list line up with
        # the check boxes above them.
        denied = QVBoxLayout()
        denied.setContentsMargins(form.layout_.contentsMargins())
        heading = QLabel("<b>Denylist</b>")
        heading.setContentsMargins(0, 8, 0, 0)
        denied.addWidget(heading)
        denied.addWidget(
            hint_label(
                "anyfill never reads or types into windows whose class matches one of these "
                "patterns (the disabled per-application rules)."
            )
        )
        # About eight rules tall: a full-height box of white reads as something missing.
        self.denylist.setMaximumHeight(8 * (self.fontMetrics().height() + 10))
        denied.addWidget(self.denylist, 1)
        denied.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(form)
        layout.addLayout(denied)
        layout.addStretch()
        draft.changed.connect(self.refresh)
        draft.reloaded.connect(self.refresh)
        form.refresh()
        self.refresh()

    def _denied(self) -> list[int]:
        rules = self.draft.data["insert"]["apps"]
        return [i for i, rule in enumerate(rules) if rule.get("disabled")]

    def refresh(self) -> None:
        rules = self.draft.data["insert"]["apps"]
        texts = []
        for i in self._denied():
            rule = rules[i]
            text = rule.get("match") or ""
            if rule.get("title"):
                text += f"  (title: {rule['title']})"
            texts.append(text)
        shown = [self.denylist.item(i).text() for i in range(self.denylist.count())]
        if shown != texts:
            self.denylist.clear()
            self.denylist.addItems(texts)

    def add(self) -> None:
        pattern, ok = QInputDialog.getText(
            self, "Deny an application", "Window class (a regular expression, e.g. (?i)^signal$):"
        )
        if ok and pattern.strip():
            self.draft.data["insert"]["apps"].insert(
                0, {**empty_rule(), "match": pattern.strip(), "disabled": True}
            )
            self.draft.touch()
            self.draft.reloaded.emit()

    def remove(self) -> None:
        row = self.denylist.currentRow()
        denied = self._denied()
        if 0 <= row < len(denied):
            del self.draft.data["insert"]["apps"][denied[row]]
            self.draft.touch()
            self.draft.reloaded.emit()

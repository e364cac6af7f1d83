"""Routing: the default chain, fallback and hedging."""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import Form


class RoutingPage(QWidget):
    title = "Routing"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = Form(draft, ("routing",))
        self.chain = form.ordered(
            "Default chain",
            ["default"],
            lambda: [b["name"] for b in draft.data["backends"]],
            tip="Backends asked for a completion, in this order",
        )
        form.note(
            "Ticked backends are asked in this order; a per-application rule may name "
            "its own chain."
        )
        self.fallback = form.check(
            "Fall back to the next backend when one fails (down, timeout, rate limit)",
            ["fallback"],
        )
        self.hedge = form.integer(
            "Hedge after",
            ["hedge_after_ms"],
            suffix=" ms",
            tip="Also start the next backend when no first token came by then (0: off)",
        )
        form.note(
            "Hedging: when the first backend has sent nothing after this long, the next "
            "one starts too and the first to answer wins (0: off)."
        )
        self.form = form
        layout = QVBoxLayout(self)
        layout.addWidget(form)
        layout.addStretch()
        draft.changed.connect(self._backends_changed)
        form.refresh()

    def _backends_changed(self) -> None:
        names = [b["name"] for b in self.form.draft.data["backends"]]
        shown = [self.chain.list.item(i).text() for i in range(self.chain.list.count())]
        if sorted(names) != sorted(shown):
            self.form.refresh()

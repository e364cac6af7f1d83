"""Backends: the list in routing order, and the selected backend's fields for its type.

The API key field never reaches the file: a typed key goes to the system keyring on Save.
**Test** sends a real, short completion through the engine on the core's loop (through the
bridge) and shows the answer, the latency and how the backend was asked, or its error.
"""

from __future__ import annotations

import copy
import functools
import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from anyfill.config.model import BACKEND_TYPES, BackendConfig
from anyfill.config.presets import PRESETS, Preset
from anyfill.daemon.fim.templates import TEMPLATES
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import ERROR_STYLE, Form, hint_label, roomy

#: Types that send a raw prompt (so a FIM template may apply) and types that cost money.
TEMPLATE_TYPES = frozenset({"llamacpp", "ollama", "openai-completions"})
CLOUD_TYPES = frozenset({"mistral-fim", "openai-chat", "anthropic", "gemini", "openai-completions"})
MANAGED = "llamacpp-managed"
#: The fields of ``[backends.server]``: how anyfill runs llama-server itself.
MANAGED_FIELDS: tuple[tuple[str, ...], ...] = (
    ("server", "binary"),
    ("server", "start"),
    ("server", "context_size"),
    ("server", "threads"),
    ("server", "gpu_layers"),
    ("server", "start_timeout_s"),
)
TYPE_LABELS = {
    "llamacpp": "llama.cpp server (native /infill)",
    MANAGED: "llama.cpp run by anyfill",
    "ollama": "Ollama",
    "openai-completions": "OpenAI-compatible (vLLM, DeepSeek…)",
    "mistral-fim": "Mistral FIM (Codestral)",
    "openai-chat": "OpenAI-compatible chat",
    "anthropic": "Anthropic",
    "gemini": "Google Gemini",
}


class BackendsPage(QWidget):
    title = "Backends"

    def __init__(self, draft: Draft, bridge: CoreBridge | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.draft = draft
        self.bridge = bridge
        self._filling = False
        self._focus_was_on_test = False
        left = self._build_list()
        self.form = Form(draft, None, tips="backends")
        self._build_identity()
        self._build_key()
        self._build_test()
        self._build_details()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.form)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(scroll)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        left.setMinimumWidth(256)
        splitter.setSizes([262, 618])  # the form's choices need their room
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        draft.reloaded.connect(self.reload)
        draft.changed.connect(self._update_items)
        draft.changed.connect(self._show_order)
        self.reload()
        self._show_order()

    def _build_list(self) -> QWidget:
        self.list = QListWidget()
        roomy(self.list, 6)
        self.list.setDragDropMode(QListWidget.DragDropMode.InternalMove)
        self.list.setAccessibleName("Backends in routing order")
        self.list.currentRowChanged.connect(self._select)
        self.list.itemChanged.connect(self._toggled)
        self.list.model().rowsMoved.connect(self._dragged)

        # Push buttons with a menu: sized for their arrow, and alike their neighbours.
        add = QPushButton("Add")
        menu = QMenu(add)
        for preset in PRESETS:
            menu.addAction(preset.label, functools.partial(self.add, preset))
        menu.addSeparator()
        menu.addAction("Empty backend", lambda: self.add(None))
        add.setMenu(menu)
        self.add_button = add
        duplicate = QPushButton("Duplicate")
        duplicate.clicked.connect(self.duplicate)
        remove = QPushButton("Remove")
        remove.clicked.connect(self.remove)
        up = QPushButton("↑")
        up.setToolTip("Ask it earlier")
        up.setAccessibleName("Move up")
        up.setFixedWidth(34)
        up.clicked.connect(lambda: self.move_selected(-1))
        down = QPushButton("↓")
        down.setToolTip("Ask it later")
        down.setAccessibleName("Move down")
        down.setFixedWidth(34)
        down.clicked.connect(lambda: self.move_selected(+1))
        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        for button in (add, duplicate, remove):
            buttons.addWidget(button)
        buttons.addStretch()
        buttons.addWidget(up)
        buttons.addWidget(down)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("In routing order; untick to disable:"))
        left_layout.addWidget(self.list, 1)
        left_layout.addLayout(buttons)
        self.order = QLabel()
        self.order.setWordWrap(True)
        self.order.setAccessibleName("The order completions ask the backends in")
        self.order.setTextFormat(Qt.TextFormat.RichText)
        left_layout.addWidget(self.order)
        return left

    def _show_order(self) -> None:
        """The effective chain in words, and what a managed server in it means."""
        chain = self.draft.effective_chain()
        if not chain:
            self.order.setText("<b>No backend is ticked</b>: completions cannot be asked.")
            return
        types = {b["name"]: b["type"] for b in self.draft.data["backends"]}
        names = " → ".join(html.escape(name) for name in chain)
        text = f"Completions ask: <b>{names}</b>"
        managed = [name for name in chain if types.get(name) == MANAGED]
        if managed and chain[0] != managed[0]:
            text += (
                f"<br>'{html.escape(managed[0])}' is the llama-server anyfill runs itself: "
                "it answers only when the ones before it do not."
            )
        elif managed and len(chain) > 1:
            text += (
                f"<br>'{html.escape(managed[0])}' comes first: while it works, the backends "
                "after it are never asked."
            )
        self.order.setText(text)

    # -- the form -------------------------------------------------------------------------

    def _build_identity(self) -> None:
        form = self.form
        self.preset = QPushButton("Fill from a preset…")
        menu = QMenu(self.preset)
        for preset in PRESETS:
            menu.addAction(preset.label, functools.partial(self.apply_preset, preset))
        self.preset.setMenu(menu)
        form.layout_.addRow("Preset", self.preset)
        self.name = form.text("Name", ["name"], tip="How routing and the CLI refer to it")
        self.name.textEdited.disconnect()
        self.name.textEdited.connect(self._rename)
        self.type = form.choice(
            "Type", ["type"], [(t, TYPE_LABELS.get(t, t)) for t in BACKEND_TYPES]
        )
        self.type.activated.connect(lambda _: self._show_type_fields())
        self.url = form.text("URL", ["url"], placeholder="http://127.0.0.1:8080")
        self.model = form.text("Model", ["model"], placeholder="(the server's default)")
        families = [("auto", "auto (from the model name)")]
        families += [(name, name) for name in sorted(TEMPLATES)]
        form.choice("FIM template", ["template"], families, editable=True)

    def _build_details(self) -> None:
        form = self.form
        if "server" in BackendConfig.model_fields:
            self.server_heading = QLabel("<b>The llama-server anyfill runs</b>")
            form.layout_.addRow(self.server_heading)
            form.text("Program", ["server", "binary"], placeholder="(found on PATH)")
            form.choice(
                "Start it",
                ["server", "start"],
                [
                    ("daemon", "with anyfill"),
                    ("request", "at the first request"),
                ],
            )
            form.integer("Context", ["server", "context_size"], suffix=" tokens")
            form.integer("CPU threads (0: auto)", ["server", "threads"])
            form.integer("GPU layers (-1: default)", ["server", "gpu_layers"])
            form.number("Loading may take", ["server", "start_timeout_s"], suffix=" s", decimals=0)
        form.section("Requests")
        form.integer("Max tokens", ["max_tokens"])
        form.number("Temperature", ["temperature"])
        form.section("Timeouts")
        form.number("Connect", ["timeouts", "connect_s"], suffix=" s", decimals=1)
        form.number("First token", ["timeouts", "first_token_s"], suffix=" s", decimals=1)
        form.number("Whole answer", ["timeouts", "total_s"], suffix=" s", decimals=1)
        form.section("Limits (0: unlimited)")
        form.integer("Requests per minute", ["limits", "requests_per_minute"])
        form.integer("Tokens per minute", ["limits", "tokens_per_minute"])
        form.integer("At the same time", ["limits", "max_concurrent"])
        self.price_heading = QLabel("<b>Price per million tokens</b>")
        form.layout_.addRow(self.price_heading)
        form.number("Input", ["price", "input_per_mtok"], decimals=3)
        form.number("Output", ["price", "output_per_mtok"], decimals=3)

    def _build_key(self) -> None:
        form = self.form
        self.key_heading = QLabel("<b>API key</b>")
        self.key_heading.setContentsMargins(0, 8, 0, 0)
        form.layout_.addRow(self.key_heading)
        form.text(
            "Environment variable",
            ["key_env"],
            placeholder="(the type's default)",
            tip="Read when the keyring holds no key for this backend",
        )
        self.key_status = hint_label("")
        form.layout_.addRow("Stored", self.key_status)
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("stored in the keyring on Save")
        self.key.setAccessibleName("API key")
        self.key.textEdited.connect(self._key_typed)
        forget = QPushButton("Forget")
        forget.setToolTip("Remove the stored key from the system keyring")
        forget.clicked.connect(self.forget_key)
        self.forget = forget
        self.key_row = QHBoxLayout()
        self.key_row.addWidget(self.key, 1)
        self.key_row.addWidget(forget)
        form.layout_.addRow("Key", self.key_row)

    def _build_test(self) -> None:
        form = self.form
        form.section("Try it")
        self.test = QPushButton("Test")
        self.test.setToolTip("Send a short real completion to this backend")
        self.test.clicked.connect(self.run_test)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.result.setAccessibleName("Test result")
        # An answer without spaces cannot wrap: it must not widen the form.
        self.result.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.result.setMinimumWidth(120)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test)
        test_row.addWidget(self.result, 1)
        form.layout_.addRow(test_row)

    # -- list ---------------------------------------------------------------------------

    @property
    def index(self) -> int:
        return self.list.currentRow()

    def reload(self) -> None:
        row = max(self.index, 0)
        self._fill_list()
        if self.list.count():
            self.list.setCurrentRow(min(row, self.list.count() - 1))
        self._select(self.index)

    def _fill_list(self) -> None:
        self._filling = True
        try:
            self.list.clear()
            for backend in self.draft.data["backends"]:
                item = QListWidgetItem(self._item_text(backend))
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                on = backend.get("enabled", True)
                item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
                self.list.addItem(item)
        finally:
            self._filling = False

    def _item_text(self, backend: dict[str, Any]) -> str:
        return f"{backend['name']}  ·  {backend['type']}"

    def _update_items(self) -> None:
        backends = self.draft.data["backends"]
        if self.list.count() != len(backends):
            return
        self._filling = True
        try:
            for row, backend in enumerate(backends):
                item = self.list.item(row)
                item.setText(self._item_text(backend))
                bad = self.draft.problems_under(("backends", row))
                item.setForeground(Qt.GlobalColor.red if bad else self.palette().text())
        finally:
            self._filling = False

    def _select(self, row: int) -> None:
        valid = 0 <= row < len(self.draft.data["backends"])
        self.form.set_base(("backends", row) if valid else None)
        if valid:
            self.key.setText(self.draft.typed_keys[row])
            self._show_type_fields()
            self._show_key_status()
        self.result.setText("")

    def _toggled(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        row = self.list.row(item)
        on = item.checkState() == Qt.CheckState.Checked
        self.draft.set_enabled(row, on)

    def _dragged(self, *_: object) -> None:
        # The list moved an item: find where each backend went and apply it to the draft.
        order = [self.list.item(i).text() for i in range(self.list.count())]
        names = [self._item_text(b) for b in self.draft.data["backends"]]
        for to, text in enumerate(order):
            src = names.index(text)
            if src != to:
                self.draft.move_backend(src, to)
                names.insert(to, names.pop(src))
        self.form.set_base(("backends", self.index) if self.index >= 0 else None)

    def add(self, preset: Preset | None) -> None:
        if preset is None:
            backend = BackendConfig(name="backend", type="llamacpp", url="http://127.0.0.1:8080")
        else:
            backend = preset.backend()
        row = self.draft.add_backend(backend.model_dump(mode="json"))
        self._fill_list()
        self.list.setCurrentRow(row)
        self.name.setFocus()

    def duplicate(self) -> None:
        row = self.index
        if row < 0:
            return
        backend = copy.deepcopy(self.draft.data["backends"][row])
        new = self.draft.add_backend(backend, at=row + 1)
        self._fill_list()
        self.list.setCurrentRow(new)

    def remove(self) -> None:
        row = self.index
        if row < 0:
            return
        self.draft.remove_backend(row)
        self._fill_list()
        self.list.setCurrentRow(min(row, self.list.count() - 1))

    def move_selected(self, step: int) -> None:
        row = self.index
        if row < 0:
            return
        self.draft.move_backend(row, row + step)
        self._fill_list()
        self.list.setCurrentRow(max(0, min(row + step, self.list.count() - 1)))

    # -- fields ---------------------------------------------------------------------------

    def apply_preset(self, preset: Preset) -> None:
        row = self.index
        if row < 0:
            return
        backend = self.draft.data["backends"][row]
        backend.update(type=preset.type, url=preset.url, model=preset.model)
        backend["key_env"] = preset.key_env
        self.draft.touch()
        self.form.refresh()
        self._show_type_fields()
        self._show_key_status()
        self.result.setText(preset.note)

    def _rename(self, text: str) -> None:
        if self.index >= 0:
            self.draft.rename_backend(self.index, text)

    def _show_type_fields(self) -> None:
        row = self.index
        if row < 0:
            return
        kind = self.draft.data["backends"][row]["type"]
        self.form.set_row_visible(["template"], kind in TEMPLATE_TYPES)
        managed = kind == MANAGED
        self.form.set_row_visible(["url"], not managed)  # anyfill picks a free port
        # A managed server gets a fresh random key from anyfill: nothing to enter.
        self.form.set_row_visible(["key_env"], not managed)
        self.key_heading.setVisible(not managed)
        self.form.layout_.setRowVisible(self.key_status, not managed)
        self.form.layout_.setRowVisible(self.key_row, not managed)
        if hasattr(self, "server_heading"):
            self.server_heading.setVisible(managed)
            for key in MANAGED_FIELDS:
                self.form.set_row_visible(list(key), managed)
        cloud = kind in CLOUD_TYPES
        self.form.set_row_visible(["price", "input_per_mtok"], cloud)
        self.form.set_row_visible(["price", "output_per_mtok"], cloud)
        self.price_heading.setVisible(cloud)
        self.form.show_problems()

    def _key_typed(self, text: str) -> None:
        row = self.index
        if row >= 0:
            self.draft.typed_keys[row] = text
            self.draft.changed.emit()

    def _backend(self) -> BackendConfig | None:
        row = self.index
        if row < 0 or self.draft.problems_under(("backends", row)):
            return None
        return BackendConfig.model_validate(copy.deepcopy(self.draft.data["backends"][row]))

    def _show_key_status(self) -> None:
        from anyfill.config.secrets import key_status

        backend = self._backend()
        if backend is None:
            self.key_status.setText("")
            return
        status = key_status(backend)
        self.key_status.setText(status.describe())
        self.forget.setEnabled(status.in_keyring)

    def forget_key(self) -> None:
        from anyfill.config.secrets import delete_api_key

        backend = self._backend()
        if backend is None:
            return
        answer = QMessageBox.question(
            self,
            "Remove the key",
            f"Remove the API key of '{backend.name}' from the system keyring?",
        )
        if answer == QMessageBox.StandardButton.Yes:
            delete_api_key(backend.name)
            self._show_key_status()

    # -- Test -----------------------------------------------------------------------------

    def run_test(self) -> None:
        from anyfill.daemon.engine.trial import TrialResult, try_backend

        backend = self._backend()
        if backend is None:
            self._show_result("fix the fields marked in red first", ok=False)
            return
        if self.bridge is None or not self.bridge.running:
            self._show_result("the anyfill core is not running: cannot test", ok=False)
            return
        typed = self.key.text().strip() or None  # a key not saved yet is tried as typed
        self._focus_was_on_test = self.test.hasFocus()
        self.test.setEnabled(False)
        self.result.setStyleSheet("")
        self.result.setText(f"Testing {backend.url}…")
        future = self.bridge.submit(try_backend(backend, api_key=typed))

        def done(result: TrialResult) -> None:
            self._test_finished()
            self._show_result(result.summary(), ok=result.ok)

        def failed(exc: BaseException) -> None:
            self._test_finished()
            self._show_result(f"the test could not run: {exc}", ok=False)

        self.bridge.then(future, done, failed)

    def _test_finished(self) -> None:
        self.test.setEnabled(True)
        # Disabling the button moved the keyboard focus on: give it back.
        if self._focus_was_on_test:
            self.test.setFocus()

    def _show_result(self, text: str, *, ok: bool) -> None:
        self.result.setStyleSheet("color: #1e7d32;" if ok else ERROR_STYLE)
        self.result.setText(("✓ " if ok else "✗ ") + text)

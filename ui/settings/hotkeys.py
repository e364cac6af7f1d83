"""Hotkeys: record each combination; say at once when it is taken or never delivered."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from anyfill.config.model import UiConfig
from anyfill.daemon.desktop.hotkeys import Hotkey, parse_hotkey
from anyfill.daemon.errors import ConfigError
from anyfill.ui.settings.draft import Draft
from anyfill.ui.settings.fields import ERROR_STYLE, Form, HotkeyEdit
from anyfill.ui.settings.keynames import hotkey_label, readable_hotkeys

ACTIONS = (
    ("complete", "Complete", "complete and insert at the caret"),
    ("preview", "Preview", "complete and show the answer first"),
    ("cancel", "Cancel", "stop the running completion"),
)


def never_delivered(hotkey: Hotkey) -> str:
    """Why a combination would never reach anyfill or the applications, or ''."""
    mods = set(hotkey.modifiers)
    if {"ctrl", "alt"} <= mods and hotkey.key[1:].isdigit() and hotkey.key.startswith("f"):
        return "Ctrl+Alt+F-keys switch the virtual terminal: the X server never delivers them"
    if {"ctrl", "alt"} <= mods and hotkey.key == "delete":
        return "Ctrl+Alt+Delete belongs to the desktop (log out / task manager)"
    if not mods or mods == {"shift"}:
        return "without Ctrl, Alt or Super this key would never reach applications again"
    return ""


class HotkeysPage(QWidget):
    title = "Hotkeys"

    def __init__(self, draft: Draft, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.draft = draft
        form = Form(draft, ("hotkeys",))
        form.note("Click a button, then press the combination (Esc keeps the old one).")
        self.edits: dict[str, HotkeyEdit] = {}
        self.checks: dict[str, QLabel] = {}
        for key, label, _ in ACTIONS:
            edit = form.hotkey(label, [key])  # its tooltip: tips.TIPS
            check = QLabel("")  # one line: wrapped labels in a form get a wrong height
            form.layout_.addRow("", check)
            form.layout_.setRowVisible(check, False)
            edit.recorded.connect(lambda text, k=key: self.check(k, text))
            self.edits[key] = edit
            self.checks[key] = check
        form.integer(
            "Wait for keys up to",
            ["modifier_release_timeout_ms"],
            suffix=" ms",
            tip="How long to wait for the user to let go of the keys",
        )
        self.form = form
        layout = QVBoxLayout(self)
        layout.addWidget(form)
        popup = self._popup_keys(draft)
        if popup is not None:
            layout.addWidget(popup)
        layout.addStretch()
        form.refresh()

    def _popup_keys(self, draft: Draft) -> Form | None:
        """The preview popup's keys, taken only while it shows (``[ui]``), where this
        version of the settings has them."""
        fields = UiConfig.model_fields
        if "preview_dismiss_key" not in fields:
            return None
        popup = Form(draft, ("ui",))
        popup.section("While a preview shows")
        popup.note("These keys are taken only while the preview popup is on screen.")
        if "preview_accept_keys" in fields:
            popup.key_list("Insert with", ["preview_accept_keys"])
        for key, label in (
            ("preview_dismiss_key", "Dismiss"),
            ("preview_next_key", "Next alternative"),
            ("preview_previous_key", "Previous alternative"),
        ):
            if key in fields:
                popup.hotkey(label, [key])
        popup.refresh()
        return popup

    def check(self, action: str, text: str) -> None:
        """Tell at once whether the recorded combination can work."""
        label = self.checks[action]
        self.form.layout_.setRowVisible(label, True)
        try:
            hotkey = parse_hotkey(text)
        except ConfigError as exc:
            label.setStyleSheet(ERROR_STYLE)
            label.setText(readable_hotkeys(str(exc)))
            return
        problem = never_delivered(hotkey)
        if not problem and text != getattr(self.draft.saved.hotkeys, action):
            # The running anyfill holds the saved combinations: only a new one is probed.
            from anyfill.daemon.x11.probe import hotkey_is_free

            if hotkey_is_free(hotkey) is False:
                problem = f"{hotkey_label(text)} is taken by another program: choose another"
        label.setStyleSheet(ERROR_STYLE if problem else "color: #1e7d32;")
        label.setText(problem or f"{hotkey_label(text)} is free")

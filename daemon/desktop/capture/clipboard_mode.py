"""Clipboard mode: the user copies (or, in a terminal, selects) text holding the cursor
marker, then presses the hotkey.

Nothing is sent to the application, so this works where keys must not be sent (terminals,
remote desktops). The marked text is looked for in CLIPBOARD and in PRIMARY: selecting
text in xterm only sets PRIMARY, and xterm has no default key to copy to CLIPBOARD. When
both hold a marker, the one the focused program owns wins (the user just selected there).
Text without the marker is completed at its end. The pipeline puts the completed text
(marker replaced by the completion) back where the text came from.
"""

from __future__ import annotations

from dataclasses import replace

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured, trimmed
from anyfill.daemon.desktop.ports import Desktop, Target, Which
from anyfill.daemon.errors import CaptureError
from anyfill.daemon.settings.live import Reader, reader


def split_marker(text: str, marker: str) -> tuple[str, str]:
    """Prefix and suffix around the first marker; later markers are dropped."""
    if marker not in text:
        return text, ""
    prefix, _, suffix = text.partition(marker)
    return prefix, suffix.replace(marker, "")


class ClipboardCapture:
    name: CaptureStrategy = "clipboard"

    @property
    def _config(self) -> CaptureConfig:
        # Read at each use: the settings in force, while what was learned here stays.
        return self._read_config()

    def __init__(self, desktop: Desktop, config: CaptureConfig | Reader[CaptureConfig]) -> None:
        self._desktop = desktop
        self._read_config = reader(config)

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        clipboard, marker = self._desktop.clipboard, self._config.cursor_marker
        timeout = self._config.copy_timeout_ms / 1000
        texts: dict[Which, str | None] = {
            "clipboard": await clipboard.read_text("clipboard", timeout),
            "primary": await clipboard.read_text("primary", timeout),
        }
        marked = [which for which, text in texts.items() if text and marker in text]
        if len(marked) > 1:
            marked.sort(key=lambda w: not clipboard.owned_by_program_of(w, target.window_id))
        source: Which = marked[0] if marked else "clipboard"
        text = texts[source]
        if not text:
            raise CaptureError(
                "the clipboard holds no text: copy (or in a terminal, select) the text with "
                f"the cursor marker {marker} in it, then press the hotkey"
            )
        prefix, suffix = split_marker(text, marker)
        captured = trimmed(prefix, suffix, target, "clipboard", self._config)
        return replace(captured, source=source)

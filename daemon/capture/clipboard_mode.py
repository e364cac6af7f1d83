"""Clipboard mode: the user copies text holding the cursor marker, then presses the hotkey.

Nothing is sent to the application, so this works where keys must not be sent (terminals,
remote desktops). Text without the marker is completed at its end. The pipeline puts the
completed text (marker replaced by the completion) back on the clipboard.
"""

from __future__ import annotations

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.apprules import AppSettings
from anyfill.daemon.capture.base import Captured, trimmed
from anyfill.daemon.desktop import Desktop, Target
from anyfill.daemon.errors import CaptureError


def split_marker(text: str, marker: str) -> tuple[str, str]:
    """Prefix and suffix around the first marker; later markers are dropped."""
    if marker not in text:
        return text, ""
    prefix, _, suffix = text.partition(marker)
    return prefix, suffix.replace(marker, "")


class ClipboardCapture:
    name: CaptureStrategy = "clipboard"

    def __init__(self, desktop: Desktop, config: CaptureConfig) -> None:
        self._desktop = desktop
        self._config = config

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        text = await self._desktop.clipboard.read_text(
            "clipboard", self._config.copy_timeout_ms / 1000
        )
        if not text:
            raise CaptureError(
                "the clipboard holds no text: copy the text with the cursor marker "
                f"{self._config.cursor_marker} in it, then press the hotkey"
            )
        prefix, suffix = split_marker(text, self._config.cursor_marker)
        return trimmed(prefix, suffix, target, "clipboard", self._config)

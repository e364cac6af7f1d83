"""A text field's content and caret, in Python string indices (code points).

AT-SPI offsets are counted in the toolkit's own unit: code points in GTK, Firefox and
Chromium, UTF-16 code units in Qt (an emoji counts two). Every offset that crosses to
or from the toolkit goes through :class:`Field`. The unit is measured where the text
tells (the character count matches one length and not the other), else taken from the
toolkit's name. ``EditableText.insert_text``'s length is bytes of UTF-8 by the AT-SPI
specification (GTK), but Qt reads that many UTF-16 units: more than the text holds, and
it pads the document with NULs and stray memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from anyfill.daemon.context import CaretRect

Unit = Literal["code point", "utf-16"]


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def is_qt(toolkit: str) -> bool:
    return toolkit.strip().lower().startswith("qt")


def insert_length(text: str, toolkit: str) -> int:
    """The ``length`` argument of ``EditableText.insert_text`` for this toolkit."""
    return utf16_length(text) if is_qt(toolkit) else len(text.encode("utf-8"))


def measured_unit(text: str, count: int, toolkit: str) -> Unit:
    """The unit of ``count`` (the field's character count) for ``text``."""
    points, units = len(text), utf16_length(text)
    if points != units:
        if count == units:
            return "utf-16"
        if count == points:
            return "code point"
    return "utf-16" if is_qt(toolkit) else "code point"


@dataclass(frozen=True)
class Field:
    text: str
    caret: int
    """Index into ``text`` (code points), whatever the toolkit counts in."""
    unit: Unit
    toolkit: str
    count: int = -1
    """The toolkit's character count (it sees past a NUL, which ends ``text``)."""

    @property
    def prefix(self) -> str:
        return self.text[: self.caret]

    @property
    def suffix(self) -> str:
        return self.text[self.caret :]

    def offset(self, index: int, text: str | None = None) -> int:
        """The toolkit's offset of ``index`` into ``text`` (default: this field's)."""
        within = self.text if text is None else text
        return index if self.unit == "code point" else utf16_length(within[:index])

    def index(self, offset: int) -> int:
        """The index into ``text`` of the toolkit's ``offset`` (one inside a surrogate pair
        rounds up to the end of the character)."""
        if self.unit == "code point":
            return min(offset, len(self.text))
        units = 0
        for position, char in enumerate(self.text):
            if units >= offset:
                return position
            units += 2 if ord(char) > 0xFFFF else 1
        return len(self.text)


STABLE_READS = 5
"""Reads of a field whose length keeps changing before its last read is taken as it is."""


def read_field(atspi: Any, node: Any, toolkit: str) -> Field:
    """The whole text and the caret of ``node``; a negative caret is -1.

    The app may be taking keys meanwhile (a typed insertion being read back): a caret read
    after more keys landed is past what the text read before holds, and its prefix would
    end in suffix characters. So the read is taken again while the length changed under it.
    """
    count = int(atspi.Text.get_character_count(node))
    for _attempt in range(STABLE_READS):
        # get_text counts in the toolkit's unit too: (0, count) is the whole text in each.
        text = str(atspi.Text.get_text(node, 0, count) or "")
        offset = int(atspi.Text.get_caret_offset(node))
        count, read = int(atspi.Text.get_character_count(node)), count
        if count == read:
            break
    count = read
    unit = measured_unit(text, count, toolkit)
    probe = Field(text, 0, unit, toolkit)
    return Field(text, probe.index(offset) if offset >= 0 else -1, unit, toolkit, count)


def caret_rect(atspi: Any, node: Any, field: Field) -> CaretRect | None:
    """The caret's box on the screen (None where the toolkit gives none)."""
    rect = atspi.Text.get_character_extents(node, field.offset(field.caret), atspi.CoordType.SCREEN)
    return CaretRect(rect.x, rect.y, max(rect.width, 1), rect.height) if rect.height > 0 else None


def toolkit_of(app: Any) -> str:
    try:
        return str(app.get_toolkit_name() or "")
    except Exception:  # noqa: BLE001 - a GLib.Error from a peer that does not say
        return ""

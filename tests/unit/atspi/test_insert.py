"""EditableText insertion against stand-ins for the toolkits' AT-SPI servers (the text
field behind libatspi): Qt counts offsets and the insert length in UTF-16 units and pads
a short string with NULs (QString::resize), the document then reads back only up to the
first NUL (D-Bus strings end there); GTK counts offsets in code points and the length in
UTF-8 bytes. What the real apps do is checked end to end in tests/e2e/test_unicode_*."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from anyfill.daemon.atspi.insert import NOT_AS_ASKED, insert_into
from anyfill.daemon.errors import InsertError, SecureField

TEXT_ROLE, PASSWORD_ROLE = "text", "password"


class Field:
    """One text field; ``pad``: extra units a broken toolkit writes after the text."""

    def __init__(self, text: str, caret: int, toolkit: str, pad: int = 0) -> None:
        self.units = _units(text) if toolkit == "Qt" else list(text)
        self.caret = caret  # in the toolkit's unit
        self.toolkit = toolkit
        self.pad = pad
        self.role = TEXT_ROLE

    @property
    def document(self) -> str:
        """What the user sees (the NULs included)."""
        return _join(self.units, self.toolkit)

    def get_role(self) -> str:
        return self.role

    def get_interfaces(self) -> list[str]:
        return ["Text", "EditableText"]


def _units(text: str) -> list[str]:
    raw = text.encode("utf-16-le")
    return [raw[i : i + 2].decode("latin-1") for i in range(0, len(raw), 2)]


def _join(units: list[str], toolkit: str) -> str:
    if toolkit != "Qt":
        return "".join(units)
    return "".join(units).encode("latin-1").decode("utf-16-le", "replace")


class Text:
    @staticmethod
    def get_character_count(node: Field) -> int:
        return len(node.units)

    @staticmethod
    def get_text(node: Field, start: int, end: int) -> str:
        return _join(node.units[start:end], node.toolkit).split("\x00")[0]

    @staticmethod
    def get_caret_offset(node: Field) -> int:
        return node.caret

    @staticmethod
    def set_caret_offset(node: Field, offset: int) -> None:
        node.caret = offset


class EditableText:
    @staticmethod
    def insert_text(node: Field, position: int, text: str, length: int) -> None:
        nul = "\x00\x00" if node.toolkit == "Qt" else "\x00"
        if node.toolkit == "Qt":
            added = (_units(text) + [nul] * length)[:length]
        else:
            added = list(text.encode("utf-8")[:length].decode("utf-8", "ignore"))
        added += [nul] * node.pad
        node.units[position:position] = added
        node.caret = position + len(added)

    @staticmethod
    def delete_text(node: Field, start: int, end: int) -> None:
        del node.units[start:end]


ATSPI: Any = SimpleNamespace(
    Text=Text, EditableText=EditableText, Role=SimpleNamespace(PASSWORD_TEXT=PASSWORD_ROLE)
)


@pytest.mark.parametrize("toolkit", ["Qt", "GTK"])
@pytest.mark.parametrize(
    ("before", "caret", "completion"),
    [
        ("Grüße aus Köln", 6, "schöne "),
        ("smile 😀 🎉 here world", 16, "big "),  # emoji before the caret
        ("party time 😀", 6, "你好🎉 ✓ "),  # emoji inside the completion and after
        ("def f():  # 😀\n    x = 1", 25, "\n    y = '😀'"),
    ],
)
def test_the_document_is_exactly_prefix_completion_suffix(
    toolkit: str, before: str, caret: int, completion: str
) -> None:
    offset = len(_units(before[:caret])) if toolkit == "Qt" else caret
    field = Field(before, offset, toolkit)

    assert insert_into(ATSPI, field, toolkit, completion) == "inserted"

    wanted = before[:caret] + completion + before[caret:]
    assert field.document == wanted
    end = before[:caret] + completion
    assert field.caret == (len(_units(end)) if toolkit == "Qt" else len(end))


def test_qt_given_utf8_bytes_would_have_padded_the_document() -> None:
    """The stand-in does what Qt did with the old length: NULs after the completion."""
    field = Field("你好世界", 2, "Qt")
    EditableText.insert_text(field, 2, "，美丽的", len("，美丽的".encode()))
    assert "\x00" in field.document


def test_stray_text_after_the_completion_is_taken_out_and_the_press_fails() -> None:
    field = Field("party time", 6, "Qt", pad=3)

    with pytest.raises(InsertError, match="not as asked"):
        insert_into(ATSPI, field, "Qt", "big ")

    assert field.document == "party time"
    assert NOT_AS_ASKED.startswith("the application changed the text")


def test_a_password_field_is_never_written() -> None:
    field = Field("hunter2", 3, "GTK")
    field.role = PASSWORD_ROLE
    with pytest.raises(SecureField):
        insert_into(ATSPI, field, "GTK", "x")
    assert field.document == "hunter2"

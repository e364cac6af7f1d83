"""Offsets between Python strings and the toolkits' AT-SPI units (Qt: UTF-16, GTK: code
points), and EditableText's length per toolkit."""

from __future__ import annotations

import pytest

from anyfill.daemon.atspi.text import Field, insert_length, measured_unit, utf16_length

TEXT = "a😀b\nçé你好🎉z"


def test_qt_offsets_count_an_emoji_twice() -> None:
    field = Field(TEXT, 0, "utf-16", "Qt")
    for index in range(len(TEXT) + 1):
        assert field.index(field.offset(index)) == index
    assert field.offset(2) == 3  # after "a😀"
    assert field.offset(len(TEXT)) == utf16_length(TEXT) == len(TEXT) + 2


def test_an_offset_inside_a_surrogate_pair_rounds_to_the_end_of_the_character() -> None:
    assert Field(TEXT, 0, "utf-16", "Qt").index(2) == 2


def test_gtk_offsets_are_code_points() -> None:
    field = Field(TEXT, 0, "code point", "GTK")
    assert [field.offset(i) for i in range(len(TEXT) + 1)] == list(range(len(TEXT) + 1))


@pytest.mark.parametrize(
    ("count", "toolkit", "unit"),
    [
        (len(TEXT) + 2, "GTK", "utf-16"),  # the count says so, whatever the name
        (len(TEXT), "Qt", "code point"),
        (999, "Qt", "utf-16"),  # the count tells nothing (a NUL cut the text): the name
        (999, "GTK", "code point"),
    ],
)
def test_the_unit_is_measured_where_the_text_tells(count: int, toolkit: str, unit: str) -> None:
    assert measured_unit(TEXT, count, toolkit) == unit


def test_without_astral_characters_the_name_decides() -> None:
    assert measured_unit("plain é", 7, "Qt") == "utf-16"
    assert measured_unit("plain é", 7, "GTK") == "code point"


def test_insert_length_is_utf16_units_for_qt_and_utf8_bytes_elsewhere() -> None:
    assert insert_length("你好😀", "Qt") == 4
    assert insert_length("你好😀", "GTK") == 10
    assert insert_length("你好😀", "") == 10

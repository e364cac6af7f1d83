from __future__ import annotations

import pytest

from anyfill.daemon.desktop.capture.clipboard_mode import split_marker
from anyfill.daemon.desktop.ports import ClipSnapshot

MARKER = "<|cursor|>"


@pytest.mark.parametrize(
    ("text", "prefix", "suffix"),
    [
        ("SELECT * FROM t WHERE <|cursor|> LIMIT 1", "SELECT * FROM t WHERE ", " LIMIT 1"),
        ("<|cursor|>rest", "", "rest"),
        ("all before<|cursor|>", "all before", ""),
        ("no marker at all", "no marker at all", ""),
        ("a<|cursor|>b<|cursor|>c", "a", "bc"),
    ],
)
def test_split_marker(text: str, prefix: str, suffix: str) -> None:
    assert split_marker(text, MARKER) == (prefix, suffix)


def test_text_snapshot_offers_the_usual_targets() -> None:
    snap = ClipSnapshot.from_text("café")
    assert set(snap.items) == {
        "UTF8_STRING",
        "text/plain;charset=utf-8",
        "text/plain",
        "TEXT",
        "STRING",
    }
    assert snap.items["STRING"][2] == "café".encode("latin-1")
    assert snap.text() == "café"


def test_text_outside_latin1_has_no_string_target() -> None:
    snap = ClipSnapshot.from_text("✓ 日本")
    assert "STRING" not in snap.items
    assert snap.text() == "✓ 日本"


def test_text_prefers_utf8_and_falls_back_to_latin1() -> None:
    assert ClipSnapshot({"STRING": ("STRING", 8, "é".encode("latin-1"))}).text() == "é"
    assert ClipSnapshot({"image/png": ("image/png", 8, b"\x89PNG")}).text() is None
    assert ClipSnapshot().empty

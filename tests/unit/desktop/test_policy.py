from __future__ import annotations

import pytest

from anyfill.daemon.desktop.inject.policy import TYPE_MODE_MAX_CHARS, choose, typeable


def test_paste_is_the_default() -> None:
    assert choose("paste", "abc", 0) == ("paste", "")


def test_short_ascii_is_typed_under_the_threshold() -> None:
    assert choose("paste", "abc", 5) == ("type", "")
    assert choose("paste", "abcdef", 5) == ("paste", "")


@pytest.mark.parametrize("text", ["schöne", "✓", "two\nlines", "日本"])
def test_non_ascii_and_newlines_are_never_typed(text: str) -> None:
    assert not typeable(text)
    assert choose("paste", text, 100)[0] == "paste"
    method, why = choose("type", text, 0)
    assert method == "paste"
    assert "pasted" in why


def test_type_mode_types_ascii_and_pastes_very_long_text() -> None:
    assert choose("type", "x = 1", 0) == ("type", "")
    assert choose("type", "x" * (TYPE_MODE_MAX_CHARS + 1), 0)[0] == "paste"


def test_preview_without_a_window_pastes_and_says_why() -> None:
    method, why = choose("preview", "abc", 0)
    assert method == "paste"
    assert "no preview window" in why

"""The virtual keyboard's keymap and chord events (the compositor-side checks are in
tests/e2e/test_wayland.py)."""

from __future__ import annotations

import re

import pytest

from anyfill.daemon.errors import InsertError
from anyfill.daemon.wayland.keymap import FIRST_EXTRA, MAX_EXTRAS, Keymap
from anyfill.daemon.wayland.virtual_keyboard import VirtualKeyboard, _chord_events


def test_the_base_keymap_is_the_standard_layout_with_a_spare_highest_key() -> None:
    text = Keymap().text()
    assert 'include "evdev+aliases(qwerty)"' in text
    assert 'include "pc+us+inet(evdev)"' in text
    assert f"<AF000> = {FIRST_EXTRA};" in text
    assert "key <AF000>" not in text  # no symbol on the highest keycode (GTK 3 skips it)


def test_characters_get_extra_keys_once_and_the_spare_key_stays_on_top() -> None:
    keymap = Keymap()
    assert keymap.add("Grüße ✓\n")
    assert not keymap.add("ße✓")  # nothing new: no upload
    text = keymap.text()
    assert "key <AF000> { [ 0xfc ] };" in text  # ü, a Latin-1 keysym
    assert "{ [ 0x1002713 ] }" in text  # ✓, a Unicode keysym
    codes = [int(n) for n in re.findall(r"<AF[0-9A-F]{3}> = (\d+);", text)]
    named = re.findall(r"key (<AF[0-9A-F]{3}>)", text)
    assert len(named) == len("üß✓") == len(codes) - 1  # ASCII is on the US keys
    assert max(codes) == FIRST_EXTRA + len(named)  # the spare one
    assert keymap.text_key("ü") == (FIRST_EXTRA - 8, False)


def test_ascii_is_typed_on_the_us_keys_with_shift_where_needed() -> None:
    keymap = Keymap()
    assert not keymap.add('Hello, World! ~ <a_b> {x|y} "q" 1+1=2?\n\t')  # no extra key
    assert keymap.text_key("h") == (35, False)
    assert keymap.text_key("H") == (35, True)
    assert keymap.text_key("~") == (41, True)
    assert keymap.text_key("?") == (53, True)
    assert keymap.text_key('"') == (40, True)
    assert keymap.text_key("\n") == (28, False)  # Return


def test_chord_keys_sit_on_their_evdev_keys() -> None:
    keymap = Keymap()
    assert keymap.chord_key("v") == 47
    assert keymap.chord_key("home") == 102
    assert keymap.chord_key("f12") == 88
    assert keymap.chord_key("ä") is None  # typed on an extra key instead


def test_a_control_character_is_refused_before_anything_is_sent() -> None:
    keymap = Keymap()
    with pytest.raises(InsertError, match=r"U\+0007"):
        keymap.add("ok\x07")
    assert not keymap.add("")


def test_too_many_characters_start_the_extra_keys_afresh() -> None:
    keymap = Keymap()
    keymap.add("".join(chr(0x4E00 + n) for n in range(MAX_EXTRAS)))
    assert keymap.add("✓")
    assert keymap.text().count("key <AF") == 1


def test_a_chord_sends_the_modifier_keys_and_their_state_around_the_key() -> None:
    assert _chord_events(["ctrl", "shift"], 102) == [
        ("key_down", 29),
        ("modifiers", 4),
        ("key_down", 42),
        ("modifiers", 5),
        ("key_down", 102),
        ("key_up", 102),
        ("key_up", 42),
        ("modifiers", 4),
        ("key_up", 29),
        ("modifiers", 0),
    ]


async def test_a_named_key_the_keyboard_lacks_is_refused_before_connecting() -> None:
    keyboard = VirtualKeyboard({"WAYLAND_DISPLAY": "/nonexistent/wayland-0"})
    with pytest.raises(InsertError, match="f25"):
        await keyboard.press("<ctrl>+<f25>")

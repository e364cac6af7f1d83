from __future__ import annotations

import pytest

from anyfill.daemon.desktop.hotkeys import Hotkey, bindings_from, parse_hotkey
from anyfill.daemon.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<ctrl>+<alt>+<space>", Hotkey(("ctrl", "alt"), "space")),
        ("<alt>+<ctrl>+<space>", Hotkey(("ctrl", "alt"), "space")),
        ("<ctrl>+<shift>+c", Hotkey(("ctrl", "shift"), "c")),
        ("<CTRL>+<Shift>+C", Hotkey(("ctrl", "shift"), "c")),
        ("<ctrl>+<alt>+<return>", Hotkey(("ctrl", "alt"), "enter")),
        ("<super>+<f5>", Hotkey(("cmd",), "f5")),
        ("<f9>", Hotkey((), "f9")),
        ("<ctrl>++", Hotkey(("ctrl",), "+")),
    ],
)
def test_parse(text: str, expected: Hotkey) -> None:
    assert parse_hotkey(text) == expected


def test_round_trips_through_str() -> None:
    hotkey = parse_hotkey("<shift>+<ctrl>+<home>")
    assert str(hotkey) == "<ctrl>+<shift>+<home>"
    assert parse_hotkey(str(hotkey)) == hotkey


@pytest.mark.parametrize("text", ["<ctrl>+<alt>", "<ctrl>+a+b", "<ctrl>++<alt>+x", ""])
def test_needs_exactly_one_key(text: str) -> None:
    with pytest.raises(ConfigError, match="hotkey"):
        parse_hotkey(text)


def test_two_actions_on_one_combination_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"hotkeys\.preview and hotkeys\.complete"):
        bindings_from("<ctrl>+<alt>+<space>", "<alt>+<ctrl>+<space>", "<ctrl>+<alt>+<f1>")


def test_bindings_parse_all_three() -> None:
    bindings = bindings_from("<ctrl>+<alt>+<space>", "<ctrl>+<alt>+<enter>", "<f12>")
    assert bindings == {
        "complete": Hotkey(("ctrl", "alt"), "space"),
        "preview": Hotkey(("ctrl", "alt"), "enter"),
        "cancel": Hotkey((), "f12"),
    }

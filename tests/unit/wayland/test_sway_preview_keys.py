"""The popup keys in sway's syntax, and which of them the user's sway config already binds."""

from __future__ import annotations

import pytest

from anyfill.daemon.hotkeys import parse_hotkey
from anyfill.daemon.wayland.sway_bindings import normalized, sway_combo, user_bindings


@pytest.mark.parametrize(
    ("chord", "combo"),
    [
        ("<tab>", "Tab"),
        ("<enter>", "Return"),
        ("<esc>", "Escape"),
        ("<alt>+]", "Mod1+bracketright"),
        ("<alt>+[", "Mod1+bracketleft"),
        ("<ctrl>+<shift>+<space>", "Ctrl+Shift+space"),
        ("<cmd>+k", "Mod4+k"),
        ("<f5>", "F5"),
    ],
)
def test_popup_keys_in_sway_syntax(chord: str, combo: str) -> None:
    assert sway_combo(parse_hotkey(chord)) == combo


def test_combinations_compare_whatever_the_spelling() -> None:
    assert normalized("Alt+Tab") == normalized("tab+Mod1")
    assert normalized("Mod4+Return") == normalized("Super+return")
    assert normalized("Ctrl+Tab") != normalized("Tab")


CONFIG = """
# a user's sway config
set $mod Mod4
set $alt Mod1
bindsym $mod+Return exec foot
bindsym --release --no-repeat $alt+bracketright exec notify-send next
bindcode 23 exec true
bindsym {
    Ctrl+Escape exec swaylock
    $mod+Tab focus next
}
mode "resize" {
    bindsym Escape mode "default"
    bindsym Tab nop
}
bar {
    status_command date
}
"""


def test_the_default_mode_bindings_of_a_sway_config() -> None:
    found = user_bindings(CONFIG)
    assert found == {
        normalized("Mod4+Return"),
        normalized("Mod1+bracketright"),
        normalized("Ctrl+Escape"),
        normalized("Mod4+Tab"),
    }
    # Bound only in another mode: free in the default mode, where the popup binds.
    assert normalized("Escape") not in found
    assert normalized("Tab") not in found


def test_an_empty_config_binds_nothing() -> None:
    assert user_bindings("") == set()

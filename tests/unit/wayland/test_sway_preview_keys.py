"""The popup keys in sway's syntax, and which of them the user's sway config already binds."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyfill.daemon.desktop.hotkeys import parse_hotkey
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


def test_a_display_that_never_answers_has_no_layer_shell_and_does_not_hang(tmp_path: Path) -> None:
    import socket
    import time

    from anyfill.daemon.wayland.preview_input import has_layer_shell

    path = tmp_path / "wayland-silent"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    try:
        began = time.monotonic()
        assert not has_layer_shell({"WAYLAND_DISPLAY": str(path)}, timeout_s=0.3)
        assert time.monotonic() - began < 2.0
        assert not has_layer_shell({"WAYLAND_DISPLAY": str(tmp_path / "absent")})
    finally:
        server.close()

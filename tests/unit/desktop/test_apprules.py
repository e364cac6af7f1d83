from __future__ import annotations

import pytest
from pydantic import ValidationError

from anyfill.config.model import AppRule, InsertConfig
from anyfill.daemon.desktop.apprules import resolve
from anyfill.daemon.desktop.ports import Target


def target(app: str, instance: str = "", process: str = "") -> Target:
    return Target(window_id=1, app=app, instance=instance, process=process)


def test_terminals_use_clipboard_mode_and_their_own_keys_by_default() -> None:
    settings = resolve(target("XTerm", "xterm"), InsertConfig(), ["accessibility", "keyboard"])
    assert settings.capture == ("clipboard",)
    assert (settings.copy_keys, settings.paste_keys) == ("<ctrl>+<shift>+c", "<ctrl>+<shift>+v")
    assert not settings.disabled


def test_password_managers_are_disabled_by_default() -> None:
    for name in ("KeePassXC", "1Password", "Bitwarden", "pinentry-gtk-2"):
        assert resolve(target(name), InsertConfig(), ["keyboard"]).disabled, name


def test_other_apps_get_the_global_settings() -> None:
    settings = resolve(target("Mousepad", "mousepad"), InsertConfig(), ["keyboard"])
    assert settings.capture == ("keyboard",)
    assert (settings.paste_keys, settings.copy_keys, settings.mode) == (
        "<ctrl>+v",
        "<ctrl>+c",
        "paste",
    )
    assert settings.rule == ""


def test_first_matching_rule_wins_and_may_match_the_process_name() -> None:
    config = InsertConfig(
        apps=[
            AppRule(match="^emacs$", paste_keys="<shift>+<insert>"),
            AppRule(match="emacs", disabled=True),
        ]
    )
    settings = resolve(target("Emacs", process="emacs"), config, ["keyboard"])
    assert settings.paste_keys == "<shift>+<insert>"
    assert not settings.disabled
    assert settings.rule == "^emacs$"


def test_a_rule_leaves_unset_fields_to_the_defaults() -> None:
    config = InsertConfig(mode="type", apps=[AppRule(match="Chromium", paste_keys="<ctrl>+v")])
    settings = resolve(target("Chromium"), config, ["accessibility", "keyboard"])
    assert settings.mode == "type"
    assert settings.capture == ("accessibility", "keyboard")


def test_a_title_pattern_narrows_a_class_pattern_or_stands_alone() -> None:
    config = InsertConfig(
        apps=[
            AppRule(match="(?i)chromium", title="(?i)webmail", backends=["local"]),
            AppRule(title="Secret notes", disabled=True),
        ]
    )
    mail = Target(window_id=1, app="Chromium", title="Inbox - Webmail")
    other_tab = Target(window_id=1, app="Chromium", title="Docs")
    notes = Target(window_id=2, app="Mousepad", title="Secret notes - Mousepad")
    assert resolve(mail, config, ["keyboard"]).backends == ("local",)
    assert resolve(other_tab, config, ["keyboard"]).rule == ""
    assert resolve(other_tab, config, ["keyboard"]).backends == ()
    assert resolve(notes, config, ["keyboard"]).disabled


def test_a_rule_without_any_pattern_is_refused() -> None:
    with pytest.raises(ValidationError, match="window class pattern"):
        AppRule(disabled=True)

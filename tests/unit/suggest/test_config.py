"""The [suggestions] table: off by default, only local backends asked automatically unless
the user allows the cloud, terminals and password managers left out by default."""

from __future__ import annotations

import pytest

from anyfill.config.model import Settings
from anyfill.config.store import InvalidConfig, default_config_text, parse_settings
from anyfill.daemon.desktop.apprules import matching_rule, resolve
from anyfill.daemon.desktop.ports import Target

CLOUD = """
[[backends]]
name = "local"
type = "llamacpp"
url = "http://127.0.0.1:8080"

[[backends]]
name = "codestral"
type = "mistral-fim"
url = "https://codestral.mistral.ai"

[[backends]]
name = "lan"
type = "ollama"
url = "http://192.168.1.20:11434"

[routing]
default = ["codestral", "local", "lan"]
"""


def test_suggestions_are_off_and_ghost_by_default() -> None:
    settings = Settings()
    assert settings.suggestions.auto is False
    assert settings.suggestions.style is None
    assert settings.suggestions.style_for(auto=True) == "ghost"
    assert settings.suggestions.style_for(auto=False) == "popup"  # the hotkey as before
    assert settings.suggestions.pause_ms == 0  # adaptive
    assert settings.suggestions.cloud_auto is False
    # the file anyfill config init writes says the same
    written = parse_settings(default_config_text(), path="default.toml", environ={})
    assert written.suggestions == settings.suggestions


def test_only_local_backends_are_asked_automatically_unless_the_user_allows_the_cloud() -> None:
    settings = parse_settings(CLOUD, path="c.toml", environ={})
    assert settings.suggestion_chain() == ("local",)
    allowed = parse_settings(
        CLOUD + "\n[suggestions]\ncloud_auto = true\n", path="c.toml", environ={}
    )
    assert allowed.suggestion_chain() == ("codestral", "local", "lan")


def test_the_auto_chain_may_differ_from_the_hotkeys() -> None:
    settings = parse_settings(
        CLOUD + '\n[suggestions]\nbackends = ["local"]\n', path="c.toml", environ={}
    )
    assert settings.routing.default == ["codestral", "local", "lan"]
    assert settings.suggestion_chain() == ("local",)
    with pytest.raises(InvalidConfig, match=r"suggestions\.backends names unknown"):
        parse_settings(CLOUD + '\n[suggestions]\nbackends = ["nope"]\n', path="c.toml", environ={})


def test_a_fixed_pause_is_100_to_1000_ms() -> None:
    for bad in (50, 1001):
        with pytest.raises(InvalidConfig):
            parse_settings(f"[suggestions]\npause_ms = {bad}\n", path="c.toml", environ={})
    assert parse_settings("[suggestions]\npause_ms = 300\n", path="c.toml", environ={})


def test_terminals_and_password_managers_get_no_suggestions_by_default() -> None:
    rules = Settings().insert.apps
    for app in ("xterm", "konsole", "KeePassXC", "Bitwarden"):
        rule = matching_rule(Target(1, app=app), rules)
        assert rule is not None, app
        assert rule.suggest is False, app
    assert matching_rule(Target(1, app="Mousepad"), rules) is None


def test_a_rule_turns_suggestions_on_or_off_for_its_app() -> None:
    settings = parse_settings(
        '[[insert.apps]]\nmatch = "^Mousepad$"\nsuggest = true\n', path="c.toml", environ={}
    )
    on = resolve(Target(1, app="Mousepad"), settings.insert, settings.capture.strategies)
    other = resolve(Target(1, app="geany"), settings.insert, settings.capture.strategies)
    assert on.suggest is True
    assert other.suggest is None  # suggestions.auto decides


def test_anyfill_status_says_when_suggestions_are_on_or_paused() -> None:
    from anyfill.daemon.control.render import status_text

    base = {"version": "1", "pid": 1, "uptime_s": 1, "state": "idle", "backends": ["local"]}
    assert "suggest:" not in status_text({**base, "suggestions": "off"})
    assert "suggest:  as you type, on" in status_text({**base, "suggestions": "on"})
    assert "suggest:  as you type, paused" in status_text({**base, "suggestions": "paused"})

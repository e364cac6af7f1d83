from __future__ import annotations

from pathlib import Path

import pytest

from anyfill.config.store import (
    InvalidConfig,
    default_config_text,
    load_settings,
    parse_settings,
    set_value,
    write_default_config,
)
from anyfill.daemon.errors import ConfigError

BAD = """\
schema_version = 1

[[backends]]
name = "llamacpp"
type = "llamacpp"
url = "http://127.0.0.1:8080"

[[backends]]
name = "ollama"
type = "ollama"
url = "http://127.0.0.1:11434"
max_tokens = "lots"

[routing]
default = ["llamacpp", "ollama"]
fallbak = true
"""


def test_default_file_is_valid_and_matches_the_model_defaults() -> None:
    from anyfill.config.model import Settings

    assert parse_settings(default_config_text(), environ={}) == Settings()


def test_errors_name_file_line_key_expected_and_found() -> None:
    with pytest.raises(InvalidConfig) as info:
        parse_settings(BAD, path="cfg.toml", environ={})
    problems = {(p.line, p.key) for p in info.value.problems}
    assert problems == {(12, "backends[1].max_tokens"), (16, "routing.fallbak")}
    text = str(info.value)
    assert "cfg.toml:12: backends[1].max_tokens" in text
    assert "a whole number is needed" in text
    assert "found 'lots'" in text
    assert "cfg.toml:16: routing.fallbak: unknown key 'fallbak' (did you mean 'fallback'?)" in text


def test_nested_table_of_an_array_element_gets_its_line() -> None:
    text = """\
[[backends]]
name = "llamacpp"
type = "llamacpp"
url = "http://127.0.0.1:8080"

[backends.limits]
requests_per_minute = -1

[[backends]]
name = "ollama"
type = "ollama"
url = "http://127.0.0.1:11434"
[backends.timeouts]
conect_s = 1
"""
    with pytest.raises(InvalidConfig) as info:
        parse_settings(text, environ={})
    found = {(p.line, p.key) for p in info.value.problems}
    assert found == {
        (7, "backends[0].limits.requests_per_minute"),
        (14, "backends[1].timeouts.conect_s"),
    }
    assert "did you mean 'connect_s'" in str(info.value)


def test_toml_syntax_error_names_the_line() -> None:
    with pytest.raises(InvalidConfig) as info:
        parse_settings("[routing]\ndefault = [\n", path="x.toml", environ={})
    assert info.value.problems[0].line is not None
    assert "not valid TOML" in str(info.value)


def test_missing_file_gives_defaults_unless_required(tmp_path: Path) -> None:
    path = tmp_path / "none.toml"
    assert load_settings(path, environ={}).routing.default == ["llamacpp", "ollama", "managed"]
    with pytest.raises(ConfigError, match="anyfill config init"):
        load_settings(path, environ={}, missing_ok=False)


def test_environment_overrides_sections_and_backends_by_name() -> None:
    settings = parse_settings(
        default_config_text(),
        environ={
            "ANYFILL_LOGGING__LEVEL": "debug",
            "ANYFILL_BACKENDS__OLLAMA__URL": "http://127.0.0.1:9999",
            "ANYFILL_BACKENDS__OLLAMA__LIMITS__MAX_CONCURRENT": "4",
            "ANYFILL_ROUTING__DEFAULT": '["ollama"]',
            "ANYFILL_UNRELATED": "ignored: no section separator",
        },
    )
    assert settings.logging.level == "DEBUG"
    assert settings.backend("ollama").url == "http://127.0.0.1:9999"
    assert settings.backend("ollama").limits.max_concurrent == 4
    assert settings.routing.default == ["ollama"]


def test_bad_environment_override_names_the_variable() -> None:
    with pytest.raises(InvalidConfig, match="environment variable ANYFILL_UI__TRAY"):
        parse_settings("", environ={"ANYFILL_UI__TRAY": "sometimes"})


def test_environment_override_of_an_unknown_backend_is_an_error() -> None:
    with pytest.raises(ConfigError, match="names no backend 'nope'"):
        parse_settings("", environ={"ANYFILL_BACKENDS__NOPE__URL": "http://127.0.0.1:1"})


def test_init_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "config.toml"
    write_default_config(path)
    path.write_text(path.read_text() + "# mine\n")
    with pytest.raises(ConfigError, match="already exists"):
        write_default_config(path)
    assert path.read_text().endswith("# mine\n")


def test_set_value_keeps_comments_and_refuses_invalid_values(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    write_default_config(path)
    set_value(path, "logging.level", "DEBUG")
    text = path.read_text()
    assert 'level = "DEBUG"' in text
    assert "# never write captured text or completions to the log" in text
    with pytest.raises(InvalidConfig):
        set_value(path, "logging.level", "LOUD")
    assert path.read_text() == text

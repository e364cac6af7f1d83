"""Saving edited settings: only the changed keys change, comments and order survive."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from anyfill.config.edit import problems_of, render_changes, save_settings
from anyfill.config.model import AppRule, BackendConfig, Settings
from anyfill.config.presets import PRESETS
from anyfill.config.store import InvalidConfig, default_config_text, parse_settings

USER_FILE = """\
# my anyfill settings
[[backends]]
name = "local"   # the GPU box
type = "llamacpp"
url = "http://127.0.0.1:8080"

[routing]
default = ["local"]  # only local
hedge_after_ms = 0

# keys I like
[hotkeys]
complete = "<ctrl>+<alt>+<space>"  # my favourite
"""


def changed_lines(old: str, new: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_only_changed_keys_change_and_comments_stay() -> None:
    before = parse_settings(USER_FILE, environ={})
    after = before.model_copy(deep=True)
    after.hotkeys.complete = "<ctrl>+<alt>+j"
    after.routing.hedge_after_ms = 300
    after.privacy.log_text = True
    new = render_changes(USER_FILE, before, after)
    assert changed_lines(USER_FILE, new) == [
        "-hedge_after_ms = 0",
        "+hedge_after_ms = 300",
        '-complete = "<ctrl>+<alt>+<space>"  # my favourite',
        '+complete = "<ctrl>+<alt>+j"  # my favourite',
        "+",
        "+[privacy]",
        "+log_text = true",
    ]
    assert parse_settings(new, environ={}) == after


def test_added_renamed_and_reordered_backends_keep_their_tables() -> None:
    before = parse_settings(USER_FILE, environ={})
    after = before.model_copy(deep=True)
    after.backends[0].name = "gpu"
    after.backends.insert(0, PRESETS[1].backend())
    after.routing.default = ["gpu", "ollama"]
    new = render_changes(USER_FILE, before, after, renamed={"gpu": "local"})
    assert 'name = "gpu"   # the GPU box' in new
    assert new.index('name = "ollama"') < new.index('name = "gpu"')
    # The new table holds its required keys and what differs from the defaults, no more.
    ollama = new[new.index('name = "ollama"') : new.index('name = "gpu"')]
    assert "max_tokens" not in ollama
    assert 'model = "qwen2.5-coder:1.5b-base"' in ollama
    assert parse_settings(new, environ={}) == after


def test_the_default_file_keeps_its_section_comments_when_a_backend_is_added() -> None:
    text = default_config_text()
    before = parse_settings(text, environ={})
    after = before.model_copy(deep=True)
    after.backends.append(PRESETS[2].backend())
    after.insert.apps.append(AppRule(title="(?i)bank", disabled=True))
    new = render_changes(text, before, after)
    added = new.index('name = "codestral"')
    assert added < new.index("# A cloud backend, for example") < new.index("[routing]")
    assert new.count("# --- ") == text.count("# --- ")
    assert parse_settings(new, environ={}) == after


def test_a_removed_rule_goes_and_a_cleared_field_is_deleted() -> None:
    text = default_config_text()
    before = parse_settings(text, environ={})
    after = before.model_copy(deep=True)
    after.insert.apps[0].paste_keys = None
    del after.insert.apps[1]
    new = render_changes(text, before, after)
    assert "keepassxc" not in new
    assert "<ctrl>+<shift>+v" not in new
    assert parse_settings(new, environ={}) == after


def test_save_validates_before_writing_and_writes_atomically(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(USER_FILE)
    before = parse_settings(USER_FILE, environ={})
    after = before.model_copy(deep=True)
    after.routing.fallback = False
    saved = save_settings(path, before, after)
    assert saved.routing.fallback is False
    assert "fallback = false" in path.read_text()
    # A settings object that the file could not hold is refused and nothing is written.
    broken = after.model_copy(deep=True)
    object.__setattr__(broken.routing, "default", ["nowhere"])
    with pytest.raises(InvalidConfig, match=r"routing\.default names unknown backend"):
        save_settings(path, after, broken)
    assert "nowhere" not in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]


def test_problems_use_the_words_of_config_validate() -> None:
    data = Settings(
        backends=[BackendConfig(name="local", type="llamacpp", url="http://127.0.0.1:8080")],
        routing={"default": ["local"]},  # type: ignore[arg-type]
    ).model_dump(mode="json")
    data["backends"][0]["url"] = "localhost 8080"
    data["backends"][0]["limits"]["requests_per_minute"] = -5
    problems = {p.key: p.message for p in problems_of(data)}
    assert problems["backends[0].limits.requests_per_minute"] == ("must be at least 0; found -5")
    assert problems["backends[0].url"].startswith("not a web address")
    text = USER_FILE.replace("hedge_after_ms = 0", "hedge_after_ms = -1")
    with pytest.raises(InvalidConfig) as info:
        parse_settings(text, environ={})
    data = parse_settings(USER_FILE, environ={}).model_dump(mode="json")
    data["routing"]["hedge_after_ms"] = -1
    assert [p.message for p in problems_of(data)] == [info.value.problems[0].message]


def test_every_preset_is_a_valid_backend() -> None:
    names = [preset.backend().name for preset in PRESETS]
    assert len(set(names)) == len(names)
    assert set(names) == {
        "llamacpp",
        "ollama",
        "codestral",
        "deepseek",
        "openai",
        "vllm",
        "litellm",
        "managed",
    }
    assert PRESETS[0].backend().url == "http://127.0.0.1:8080"


def test_an_entry_removed_from_a_free_form_map_leaves_the_file() -> None:
    text = USER_FILE.replace(
        'url = "http://127.0.0.1:8080"\n',
        'url = "http://127.0.0.1:8080"\n\n[backends.headers]\nX-Team = "blue"\nX-Keep = "1"\n',
    )
    before = parse_settings(text, environ={})
    after = before.model_copy(deep=True)
    del after.backends[0].headers["X-Team"]
    new = render_changes(text, before, after)
    assert changed_lines(text, new) == ['-X-Team = "blue"']
    assert parse_settings(new, environ={}) == after


def test_no_comment_is_lost_when_backends_are_added_and_moved() -> None:
    text = default_config_text()
    before = parse_settings(text, environ={})
    after = before.model_copy(deep=True)
    after.backends.append(PRESETS[2].backend())
    after.backends.append(after.backends.pop(0))  # the first one goes last
    new = render_changes(text, before, after)
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert [line for line in comments if line not in new.splitlines()] == []
    assert parse_settings(new, environ={}) == after

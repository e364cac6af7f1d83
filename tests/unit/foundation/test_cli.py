"""The CLI as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ANYFILL = [sys.executable, "-m", "anyfill.daemon.cli"]


def run(
    *args: str, env: dict[str, str] | None = None, **kw: object
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("ANYFILL_CONFIG", None)
    if env and "ANYFILL_CONFIG" in env:
        full_env["ANYFILL_CONFIG"] = env["ANYFILL_CONFIG"]
    return subprocess.run(
        [*ANYFILL, *args],
        check=False,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
        **kw,
    )


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An isolated XDG home so nothing touches the real user's files."""
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }


def test_help_lists_every_command() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("run", "complete", "doctor", "config", "version", "worker", "bench", "eval"):
        assert f"  {command}" in result.stdout


def test_version() -> None:
    result = run("version")
    assert result.returncode == 0
    assert result.stdout.startswith("anyfill ")


def test_init_then_validate(home: dict[str, str], tmp_path: Path) -> None:
    path = run("config", "path", env=home).stdout.strip()
    assert path == str(tmp_path / "config" / "anyfill" / "config.toml")
    assert run("config", "init", env=home).returncode == 0
    assert Path(path).exists()
    result = run("config", "validate", env=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{path}: ok"
    again = run("config", "init", env=home)
    assert again.returncode == 2
    assert "already exists" in again.stderr


def test_validate_reports_wrong_type_and_unknown_key_by_line(
    tmp_path: Path, home: dict[str, str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        "[[backends]]\n"
        'name = "llamacpp"\n'
        'type = "llamacpp"\n'
        'url = "http://127.0.0.1:8080"\n'
        "max_tokens = true\n"
        "\n"
        "[routing]\n"
        'default = ["llamacpp"]\n'
        "hedge_after = 5\n"
    )
    result = run("--config", str(config), "config", "validate", env=home)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"{config}:5: backends[0].max_tokens" in result.stderr
    assert f"{config}:9: routing.hedge_after: unknown key 'hedge_after'" in result.stderr
    assert "did you mean 'hedge_after_ms'" in result.stderr


def test_validate_of_a_missing_file_agrees_with_doctor_the_defaults_are_in_force(
    tmp_path: Path, home: dict[str, str]
) -> None:
    """No file is how anyfill starts (doctor says 'ok, using the defaults'): validate said
    'no such file' and exited 2."""
    path = tmp_path / "nope.toml"
    result = run("--config", str(path), "config", "validate", env=home)
    assert result.returncode == 0, result.stderr
    assert f"{path}: no file, so the defaults are in force" in result.stdout
    assert "anyfill config init" in result.stdout
    doctor = run("--config", str(path), "doctor", "--json", env=home)
    assert f"no file at {path}: using the defaults" in doctor.stdout


def test_show_changed_names_only_what_the_user_changed(
    tmp_path: Path, home: dict[str, str]
) -> None:
    """A changed default backend shows by its name and the changed key; the untouched
    defaults and the managed server's placeholder url (port 0) are not shown."""
    config = tmp_path / "c.toml"
    assert run("--config", str(config), "config", "init", env=home).returncode == 0
    assert run("--config", str(config), "config", "show", "--changed", env=home).stdout == ""
    text = config.read_text()
    start = text.index('name = "ollama"')
    end = text.index("max_tokens = 128", start)
    config.write_text(text[:end] + "max_tokens = 64" + text[end + len("max_tokens = 128") :])
    shown = run("--config", str(config), "config", "show", "--changed", env=home)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == '[[backends]]\nname = "ollama"\nmax_tokens = 64\n'

    config.write_text(
        '[[backends]]\nname = "mine"\ntype = "llamacpp"\nurl = "http://127.0.0.1:8081"\n'
        '[[backends]]\nname = "managed"\ntype = "llamacpp-managed"\nmodel = "qwen2.5-coder-1.5b"\n'
        '[routing]\ndefault = ["mine", "managed"]\n'
    )
    shown = run("--config", str(config), "config", "show", "--changed", env=home).stdout
    assert 'name = "mine"\ntype = "llamacpp"\nurl = "http://127.0.0.1:8081"' in shown
    assert "127.0.0.1:0" not in shown
    assert 'name = "managed"' not in shown
    assert "# default backends left out of the file: llamacpp, ollama" in shown


def test_complete_help_names_every_output_field_and_option() -> None:
    shown = run("complete", "--help").stdout
    assert '{"id","line","middle","backend","ms","error"}' in shown
    assert "--max-tokens N      Longest answer, in tokens" in shown


def test_debug_shows_the_traceback(tmp_path: Path, home: dict[str, str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("schema_version = 'x'\n")
    quiet = run("--config", str(config), "config", "validate", env=home)
    loud = run("--debug", "--config", str(config), "config", "validate", env=home)
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in loud.stderr
    assert quiet.returncode == loud.returncode == 2


def test_show_prints_the_effective_config_with_env_overrides(home: dict[str, str]) -> None:
    result = run("config", "show", env={**home, "ANYFILL_LOGGING__LEVEL": "WARNING"})
    assert result.returncode == 0, result.stderr
    assert 'level = "WARNING"' in result.stdout
    assert 'url = "http://127.0.0.1:11434"' in result.stdout


def test_set_key_stores_in_the_keyring(tmp_path: Path, home: dict[str, str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[[backends]]\nname = "codestral"\ntype = "mistral-fim"\nurl = "https://codestral.mistral.ai"\n'
        '[routing]\ndefault = ["codestral"]\n'
    )
    env = {**home, "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring"}
    result = run(
        "--config",
        str(config),
        "config",
        "set-key",
        "codestral",
        "--stdin",
        env=env,
        input="abc-123\n",
    )
    assert result.returncode == 0, result.stderr
    stored = list((tmp_path / "data").rglob("keyring_pass.cfg"))
    assert stored, "the plaintext keyring file was not written under XDG_DATA_HOME"
    unknown = run(
        "--config", str(config), "config", "set-key", "nope", "--stdin", env=env, input="x\n"
    )
    assert unknown.returncode == 2
    assert "no backend named 'nope'" in unknown.stderr
    # mqtt.insert_key's default entry: the secret remote insert requests are signed with
    insert = run(
        "--config", str(config), "config", "set-key", "mqtt-insert", "--stdin", env=env, input="s\n"
    )
    assert insert.returncode == 0, insert.stderr
    assert "stored the key for 'mqtt-insert'" in insert.stdout


def test_run_headless_starts_and_stops_on_sigterm(home: dict[str, str], tmp_path: Path) -> None:
    import signal
    import time

    env = {**os.environ, **home}
    env.pop("ANYFILL_CONFIG", None)
    env.pop("DISPLAY", None)
    log = tmp_path / "out.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*ANYFILL, "run", "--headless"], stdout=out, stderr=out, env=env)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and "running" not in log.read_text():
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    # Without a display the desktop path cannot start: either it runs (core only) and stops
    # cleanly on SIGTERM, or it exits at once with a clear one-line reason.
    assert "Traceback" not in text
    if code != 0:
        assert "display" in text.lower(), text


def test_settings_opens_the_panel_through_its_entry_point() -> None:
    """The core never imports Qt: `anyfill settings` finds the panel by its entry point."""
    from importlib.metadata import entry_points

    (entry,) = entry_points(group="anyfill.frontends", name="settings")
    assert entry.value == "anyfill.ui.settings.standalone:run_settings"
    assert callable(entry.load())


@pytest.mark.parametrize("command", [("config", "validate"), ("config", "show"), ("doctor",)])
def test_a_config_path_that_is_a_directory_is_named_not_an_internal_error(
    home: dict[str, str], command: tuple[str, ...]
) -> None:
    # The default path, which --config's own check does not see (issue 24).
    (Path(home["XDG_CONFIG_HOME"]) / "anyfill" / "config.toml").mkdir(parents=True)
    result = run(*command, env=home)
    assert result.returncode != 0
    assert "internal error" not in result.stderr + result.stdout
    assert "config.toml: not a regular file" in result.stderr + result.stdout

"""anyfill autostart on Linux, against a private home: idempotent, and a file the user
edited is never replaced or removed without --force (and then a copy is kept)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anyfill.daemon.autostart import entries
from anyfill.daemon.autostart.linux import LinuxAutostart, LinuxPaths
from anyfill.daemon.errors import AutostartError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux layout")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PATH": os.environ.get("PATH", ""),
    }


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "venv bin" / "anyfill"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_enable_writes_the_entry_the_launcher_and_the_icons(
    env: dict[str, str], program: Path
) -> None:
    auto = LinuxAutostart([str(program), "run"], env)
    done = auto.enable("xdg")
    paths = LinuxPaths.from_env(env)
    assert paths.autostart.read_text() == entries.xdg_autostart([str(program), "run"])
    assert paths.launcher.read_text() == entries.desktop_launcher([str(program), "run"])
    assert (paths.icons / "scalable" / "apps" / "anyfill.svg").read_bytes().startswith(b"<svg")
    assert (paths.icons / "48x48" / "apps" / "anyfill.png").read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {paths.autostart}" in done
    status = auto.status()
    assert status.enabled
    assert [(e.method, e.state, e.problem) for e in status.entries] == [("xdg", "current", "")]
    assert status.launcher == "current"


def test_enable_twice_changes_nothing(env: dict[str, str], program: Path, tmp_path: Path) -> None:
    auto = LinuxAutostart([str(program), "run"], env)
    auto.enable("xdg")
    before = snapshot(tmp_path)
    done = auto.enable("xdg")
    assert snapshot(tmp_path) == before
    assert not [line for line in done if line.startswith("wrote")]
    assert any(line.startswith("unchanged") for line in done)


def test_an_edited_entry_is_not_replaced_without_force(env: dict[str, str], program: Path) -> None:
    auto = LinuxAutostart([str(program), "run"], env)
    auto.enable("xdg")
    path = LinuxPaths.from_env(env).autostart
    edited = path.read_text().replace("Terminal=false", "Terminal=false\nX-My-Tweak=1")
    path.write_text(edited)
    newer = LinuxAutostart([str(program), "--debug", "run"], env)
    with pytest.raises(AutostartError, match="changed since anyfill wrote it") as raised:
        newer.enable("xdg")
    assert "--force" in str(raised.value)
    assert path.read_text() == edited
    assert [e.state for e in newer.status().entries] == ["edited"]

    done = newer.enable("xdg", force=True)
    backup = path.with_name("anyfill.desktop.anyfill-backup")
    assert backup.read_text() == edited
    assert path.read_text() == entries.xdg_autostart([str(program), "--debug", "run"])
    assert any(str(backup) in line for line in done)


def test_an_entry_anyfill_wrote_for_another_command_is_updated(
    env: dict[str, str], program: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old" / "anyfill"
    LinuxAutostart([str(old), "run"], env).enable("xdg")
    auto = LinuxAutostart([str(program), "run"], env)
    status = auto.status()
    assert status.entries[0].state == "outdated"
    assert "which is missing" in status.entries[0].problem
    assert not status.enabled
    auto.enable("xdg")  # no --force needed: anyfill wrote it and nobody touched it
    assert auto.status().enabled


def test_a_file_anyfill_never_wrote_is_left_alone(env: dict[str, str], program: Path) -> None:
    path = LinuxPaths.from_env(env).autostart
    path.parent.mkdir(parents=True)
    path.write_text("[Desktop Entry]\nType=Application\nName=mine\nExec=/usr/bin/true\n")
    with pytest.raises(AutostartError, match="was not written by anyfill"):
        LinuxAutostart([str(program), "run"], env).enable("xdg")
    with pytest.raises(AutostartError, match="was not written by anyfill"):
        LinuxAutostart([str(program), "run"], env).disable()
    assert "Name=mine" in path.read_text()


def test_disable_removes_only_the_entry_and_is_idempotent(
    env: dict[str, str], program: Path
) -> None:
    auto = LinuxAutostart([str(program), "run"], env)
    auto.enable("xdg")
    paths = LinuxPaths.from_env(env)
    done = auto.disable()
    assert not paths.autostart.exists()
    assert paths.launcher.exists()  # the menu entry stays
    assert f"removed {paths.autostart}" in done
    assert auto.disable()[-1] == "autostart was already off"
    assert not auto.status().entries


def test_turned_off_in_the_desktop_settings_is_reported(env: dict[str, str], program: Path) -> None:
    auto = LinuxAutostart([str(program), "run"], env)
    auto.enable("xdg")
    path = LinuxPaths.from_env(env).autostart
    path.write_text(path.read_text().replace("Autostart-enabled=true", "Autostart-enabled=false"))
    entry = auto.status().entries[0]
    assert entry.state == "edited"
    assert "turned off" in entry.problem


def test_switching_to_systemd_replaces_the_xdg_entry(
    env: dict[str, str], program: Path, tmp_path: Path
) -> None:
    auto = LinuxAutostart([str(program), "run"], env)
    auto.enable("xdg")
    auto.enable("systemd")
    paths = LinuxPaths.from_env(env)
    assert not paths.autostart.exists()
    assert paths.unit.read_text() == entries.systemd_unit([str(program), "run"])
    assert paths.wants_link.is_symlink()
    assert paths.wants_link.resolve() == paths.unit.resolve()
    assert [e.method for e in auto.status().entries] == ["systemd"]
    auto.enable()  # run again without a method: it stays a unit
    assert paths.unit.exists()
    assert not paths.autostart.exists()
    if shutil.which("systemd-analyze"):
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        verify = subprocess.run(
            ["systemd-analyze", "verify", "--user", str(paths.unit)],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
            timeout=60,
            check=False,
        )
        assert (verify.returncode, verify.stderr) == (0, "")
    auto.disable()
    assert not paths.unit.exists()
    assert not paths.wants_link.is_symlink()


def anyfill(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.launcher", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_the_command_line(env: dict[str, str]) -> None:
    enabled = anyfill(env, "autostart", "enable")
    assert enabled.returncode == 0, enabled.stderr
    assert "starts with your desktop session" in enabled.stdout
    status = json.loads(anyfill(env, "autostart", "status", "--json").stdout)
    assert status["enabled"] is True
    assert status["entries"][0]["method"] == "xdg"
    path = Path(status["entries"][0]["location"])
    path.write_text(path.read_text() + "X-Mine=1\n")
    refused = anyfill(env, "autostart", "disable")
    assert refused.returncode == 1
    assert "changed since anyfill wrote it" in refused.stderr
    assert path.exists()
    assert anyfill(env, "autostart", "disable", "--force").returncode == 0
    assert not path.exists()
    assert "off:" in anyfill(env, "autostart", "status").stdout

"""The per-OS start-up files: what they say, that the system's own validators accept them,
and that packaging/ holds exactly what the one renderer produces."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anyfill.daemon.autostart import entries
from anyfill.daemon.autostart.linux import _unit_exec_start, desktop_exec_argv

REPO = Path(__file__).resolve().parents[3]
NASTY = [
    ["/usr/bin/anyfill", "run"],
    ["/home/jo smith/.local/bin/anyfill", "run"],
    ["/opt/a$b/any`fill`", "--config", "/tmp/50% done/c.toml", "run"],
    ['/tmp/quote"d/back\\slash/anyfill', "run"],
    ["/tmp/semi;colon/#hash/anyfill", "run"],
]


@pytest.mark.parametrize("argv", NASTY)
def test_desktop_exec_reads_back_as_the_same_argv(argv: list[str]) -> None:
    assert desktop_exec_argv(entries.desktop_exec(argv)) == argv


@pytest.mark.parametrize("argv", NASTY)
def test_systemd_exec_reads_back_as_the_same_argv(argv: list[str]) -> None:
    line = f"ExecStart={entries.systemd_exec(argv)}"
    assert _unit_exec_start(line) == argv


needs_validate = pytest.mark.skipif(
    shutil.which("desktop-file-validate") is None,
    reason="needs desktop-file-validate (apt: desktop-file-utils)",
)


@needs_validate
@pytest.mark.parametrize("argv", NASTY)
def test_desktop_file_validate_accepts_both_entries(tmp_path: Path, argv: list[str]) -> None:
    launcher = tmp_path / "anyfill.desktop"
    launcher.write_text(entries.desktop_launcher(argv))
    autostart = tmp_path / "autostart.desktop"
    autostart.write_text(entries.xdg_autostart(argv))
    result = subprocess.run(
        ["desktop-file-validate", str(launcher), str(autostart)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@needs_validate
def test_desktop_file_validate_accepts_every_desktop_file_in_packaging() -> None:
    files = sorted(str(path) for path in (REPO / "packaging").rglob("*.desktop"))
    assert len(files) == 2
    result = subprocess.run(
        ["desktop-file-validate", *files], capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@needs_validate
def test_desktop_file_validate_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    broken = tmp_path / "broken.desktop"
    broken.write_text(entries.desktop_launcher(["anyfill"]).replace("Type=Application\n", ""))
    result = subprocess.run(
        ["desktop-file-validate", str(broken)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "Type" in result.stdout


def _verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)}
    return subprocess.run(
        ["systemd-analyze", "verify", "--user", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (apt: systemd)"
)


@needs_analyze
def test_systemd_analyze_verifies_the_user_unit(tmp_path: Path) -> None:
    program = tmp_path / "bin dir" / "anyfill"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    unit = tmp_path / entries.UNIT_NAME
    unit.write_text(entries.systemd_unit([str(program), "run"]))
    result = _verify(unit, tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@needs_analyze
def test_systemd_analyze_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    unit = tmp_path / entries.UNIT_NAME
    unit.write_text(
        entries.systemd_unit([str(tmp_path / "missing"), "run"]).replace("Restart=", "Restrat=")
    )
    result = _verify(unit, tmp_path)
    assert result.returncode != 0
    assert "Restrat" in result.stderr
    assert "is not executable" in result.stderr


def test_the_unit_starts_with_the_graphical_session_and_restarts_on_failure() -> None:
    unit = entries.systemd_unit(["/usr/bin/anyfill", "run"])
    lines = set(unit.splitlines())
    assert {
        "PartOf=graphical-session.target",
        "After=graphical-session.target",
        "WantedBy=graphical-session.target",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",  # a broken config: no restart loop
        "ExecStart=/usr/bin/anyfill run",
    } <= lines
    assert "default.target" not in unit


def test_launch_agent_runs_at_load_with_a_path() -> None:
    agent = plistlib.loads(
        entries.launch_agent(["/Applications/anyfill.app/Contents/MacOS/anyfill", "run"], "/x:/y")
    )
    assert agent["Label"] == entries.MAC_LABEL
    assert agent["RunAtLoad"] is True
    assert agent["EnvironmentVariables"] == {"PATH": "/x:/y"}
    assert agent["ProgramArguments"][-1] == "run"
    assert agent["KeepAlive"] == {"SuccessfulExit": False}  # restarted after a crash only


def test_the_mac_app_stays_out_of_the_dock() -> None:
    info = entries.mac_info_plist("1.2.3")
    assert info["LSUIElement"] is True
    assert info["CFBundleIdentifier"] == entries.MAC_LABEL
    assert plistlib.loads(plistlib.dumps(info))["CFBundleShortVersionString"] == "1.2.3"


def test_windows_run_entry_quotes_a_path_with_spaces() -> None:
    entry = entries.windows_run_entry([r"C:\Program Files\anyfill\anyfill.exe", "run"])
    assert entry.key == r"Software\Microsoft\Windows\CurrentVersion\Run"
    assert entry.name == "anyfill"
    assert entry.command == r'"C:\Program Files\anyfill\anyfill.exe" run'
    reg = entry.as_reg_file()
    assert "[HKEY_CURRENT_USER\\Software\\Microsoft\\Windows\\CurrentVersion\\Run]" in reg
    assert '"anyfill"="\\"C:\\\\Program Files\\\\anyfill\\\\anyfill.exe\\" run"' in reg


def test_packaging_files_are_what_the_renderer_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("linux/anyfill.service", "linux/anyfill.desktop", "windows/anyfill-run.reg"):
        assert (REPO / "packaging" / name).is_file()

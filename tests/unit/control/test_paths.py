"""Where the control socket lives, and the checks that keep its directory private."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import platformdirs
import pytest

from anyfill.daemon import runtime_dir as paths
from anyfill.daemon.errors import ControlError

ROOT = os.geteuid() == 0
OTHER_UID = 65534  # nobody


def private(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


def test_a_private_xdg_runtime_dir_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = private(tmp_path / "run")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert paths.socket_path() == str(runtime / "anyfill" / "control.sock")
    assert paths.lock_path() == str(runtime / "anyfill" / "instance.lock")


def test_without_xdg_runtime_dir_it_is_platformdirs_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = platformdirs.user_runtime_dir()
    assert paths.control_dir() == os.path.join(expected, "anyfill")
    assert expected != ""


@pytest.mark.parametrize("mode", [0o755, 0o711])
def test_an_xdg_runtime_dir_others_can_enter_is_not_used(
    mode: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir()
    runtime.chmod(mode)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert not paths.control_dir().startswith(str(runtime))


def test_a_relative_xdg_runtime_dir_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "run")
    assert os.path.isabs(paths.control_dir())


def test_ensure_private_dir_creates_it_and_a_missing_parent_with_mode_0700(tmp_path: Path) -> None:
    target = tmp_path / "runtime-1" / "anyfill"
    old = os.umask(0o000)  # a permissive umask must not make the directories public
    try:
        paths.ensure_private_dir(str(target))
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700


def test_our_own_directory_that_others_can_enter_is_tightened(tmp_path: Path) -> None:
    target = tmp_path / "anyfill"
    target.mkdir()
    target.chmod(0o755)
    paths.ensure_private_dir(str(target))
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_check_without_fix_names_the_chmod(tmp_path: Path) -> None:
    target = tmp_path / "anyfill"
    target.mkdir()
    target.chmod(0o750)
    with pytest.raises(ControlError, match="chmod 700"):
        paths.check_private_dir(str(target))


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    real = private(tmp_path / "elsewhere")
    link = tmp_path / "anyfill"
    link.symlink_to(real)
    with pytest.raises(ControlError, match="not a directory"):
        paths.ensure_private_dir(str(link))


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "anyfill").write_text("")
    with pytest.raises(ControlError, match="not a directory"):
        paths.ensure_private_dir(str(tmp_path / "anyfill"))


@pytest.mark.skipif(not ROOT, reason="giving a directory to another user needs root")
def test_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "anyfill"
    target.mkdir(mode=0o700)
    os.chown(target, OTHER_UID, OTHER_UID)
    with pytest.raises(ControlError, match="belongs to another user"):
        paths.ensure_private_dir(str(target))
    # Not even tightened or otherwise touched.
    assert target.stat().st_uid == OTHER_UID


def test_a_socket_path_longer_than_sun_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="too long"):
        paths.check_socket_path_length(str(tmp_path / ("x" * 120) / "control.sock"))
    paths.check_socket_path_length("/run/user/1000/anyfill/control.sock")

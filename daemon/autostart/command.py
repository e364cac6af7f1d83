"""Which command starts this installation of anyfill, as an absolute path."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def launch_argv() -> tuple[str, ...]:
    """The argv that runs *this* anyfill (without the ``run`` subcommand).

    A PyInstaller bundle is its own executable. Otherwise the ``anyfill`` script beside
    this interpreter (a venv, pipx or uv tool install), not resolved: pipx keeps that path
    across upgrades. Last, the interpreter runs the launcher module itself.
    """
    if getattr(sys, "frozen", False):
        return (str(Path(sys.executable).absolute()),)
    beside = Path(sys.executable).absolute().parent / "anyfill"
    if beside.is_file():
        return (str(beside),)
    found = shutil.which("anyfill")
    if found:
        return (str(Path(found).absolute()),)
    return (str(Path(sys.executable).absolute()), "-m", "anyfill.daemon.launcher")


def run_argv() -> tuple[str, ...]:
    return (*launch_argv(), "run")

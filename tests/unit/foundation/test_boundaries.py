"""The core (daemon/, config/) never imports Qt or the UI: checked on the source and at run time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FORBIDDEN = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "anyfill.ui")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("folder", ["daemon", "config"])
def test_core_sources_never_import_qt_or_ui(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no sources found under {folder}/"
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in files
        for line, module in _imported_modules(path)
        if module.split(".")[0] in FORBIDDEN or module.startswith("anyfill.ui")
    ]
    assert offenders == []


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from PySide6.QtWidgets import QWidget\n")
    assert _imported_modules(sample) == [(2, "PySide6.QtWidgets")]


def test_importing_the_core_loads_no_qt() -> None:
    code = (
        "import anyfill.daemon, anyfill.config, anyfill.daemon.cli, anyfill.daemon.app, sys; "
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6', 'anyfill.ui'))]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_help_and_version_stay_light() -> None:
    """`anyfill --help` and `anyfill version` answer without Qt, pynput or httpx."""
    code = (
        "import sys\n"
        "from anyfill.daemon.cli import main\n"
        "for argv in (['--help'], ['version'], ['config', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('PySide6', 'pynput', 'httpx', 'Xlib', 'aiomqtt', 'pydantic')]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)

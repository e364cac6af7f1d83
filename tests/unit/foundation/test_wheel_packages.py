"""Every folder with an ``__init__.py`` is a package the wheel lists: a subpackage missing
from ``[tool.setuptools] packages`` works from the checkout and is absent for pipx users."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_every_package_folder_is_in_the_wheel() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *relative)))
    assert sorted(found - listed) == []
    assert sorted(listed - found) == []

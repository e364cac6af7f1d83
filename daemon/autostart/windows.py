"""Autostart on Windows: a value under ``HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run``.
UNTESTED on Windows: the value's content is checked on Linux, writing it is not.

A value named ``anyfill`` holding another command is the user's: it is replaced only with
``--force``.
"""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Sequence
from typing import Any

from anyfill.daemon.autostart import entries
from anyfill.daemon.autostart.files import State
from anyfill.daemon.autostart.status import AutostartStatus, Entry
from anyfill.daemon.errors import AutostartError


class WindowsAutostart:
    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = tuple(argv)
        self.entry = entries.windows_run_entry(self.argv)

    def _read(self) -> str | None:
        winreg = _winreg()
        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, self.entry.key) as key:
                value, _ = winreg.QueryValueEx(key, self.entry.name)
        except FileNotFoundError:
            return None
        return str(value)

    def _write(self, value: str | None) -> None:
        winreg = _winreg()
        with winreg.CreateKey(winreg.HKEY_CURRENT_USER, self.entry.key) as key:
            if value is None:
                winreg.DeleteValue(key, self.entry.name)
            else:
                winreg.SetValueEx(key, self.entry.name, 0, winreg.REG_SZ, value)

    def _where(self) -> str:
        return f"HKEY_CURRENT_USER\\{self.entry.key}\\{self.entry.name}"

    def enable(self, *, force: bool = False) -> list[str]:
        current = self._read()
        if current == self.entry.command:
            return [f"unchanged {self._where()}"]
        if current is not None and not _ours(current) and not force:
            raise AutostartError(
                f"{self._where()} already holds another command ({current}). Nothing was "
                "changed: run again with --force to replace it"
            )
        self._write(self.entry.command)
        return [f"wrote {self._where()} = {self.entry.command}"]

    def disable(self, *, force: bool = False) -> list[str]:
        current = self._read()
        if current is None:
            return ["autostart was already off"]
        if not _ours(current) and not force:
            raise AutostartError(
                f"{self._where()} holds a command anyfill did not write ({current}). "
                "Nothing was changed: run again with --force to remove it"
            )
        self._write(None)
        return [f"removed {self._where()}"]

    def status(self) -> AutostartStatus:
        current = self._read()
        found = []
        if current is not None:
            state: State = "current" if current == self.entry.command else "outdated"
            found.append(Entry("registry", self._where(), state, note=current))
        return AutostartStatus(found, "absent", subprocess.list2cmdline(list(self.argv)))


def _winreg() -> Any:
    try:
        return importlib.import_module("winreg")
    except ImportError as exc:
        raise AutostartError("the Windows registry exists only on Windows") from exc


def _ours(command: str) -> bool:
    """A command anyfill wrote: its executable is an anyfill and it runs ``run``."""
    words = command.split()
    return len(words) >= 2 and words[-1] == "run" and "anyfill" in words[0].lower()

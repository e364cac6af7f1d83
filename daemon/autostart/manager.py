"""``anyfill autostart``: this operating system's way, chosen once."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Literal

from anyfill.daemon.autostart.command import run_argv
from anyfill.daemon.autostart.status import AutostartStatus


def enable(method: str | None = None, *, force: bool = False) -> list[str]:
    if sys.platform == "darwin":
        from anyfill.daemon.autostart.macos import MacAutostart

        return MacAutostart(run_argv()).enable(force=force)
    if sys.platform == "win32":
        from anyfill.daemon.autostart.windows import WindowsAutostart

        return WindowsAutostart(run_argv()).enable(force=force)
    from anyfill.daemon.autostart.linux import LinuxAutostart

    chosen: Literal["xdg", "systemd"] | None = (
        "systemd" if method == "systemd" else "xdg" if method == "xdg" else None
    )
    return LinuxAutostart(run_argv()).enable(chosen, force=force)


def disable(*, force: bool = False) -> list[str]:
    if sys.platform == "darwin":
        from anyfill.daemon.autostart.macos import MacAutostart

        return MacAutostart(run_argv()).disable(force=force)
    if sys.platform == "win32":
        from anyfill.daemon.autostart.windows import WindowsAutostart

        return WindowsAutostart(run_argv()).disable(force=force)
    from anyfill.daemon.autostart.linux import LinuxAutostart

    return LinuxAutostart(run_argv()).disable(force=force)


def status(environ: Mapping[str, str] | None = None) -> AutostartStatus:
    if sys.platform == "darwin":
        from anyfill.daemon.autostart.macos import MacAutostart

        return MacAutostart(run_argv()).status()
    if sys.platform == "win32":
        from anyfill.daemon.autostart.windows import WindowsAutostart

        return WindowsAutostart(run_argv()).status()
    from anyfill.daemon.autostart.linux import LinuxAutostart

    return LinuxAutostart(run_argv(), environ).status()

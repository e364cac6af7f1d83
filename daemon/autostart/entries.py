"""The one place every per-OS start-up file is written from.

``anyfill autostart enable`` renders these with the absolute command of this installation;
``packaging/generate`` renders the same functions with a bare ``anyfill`` into
``packaging/`` (for the bundle and for distributions), and a test keeps the two in step.
Pure functions: no file is read or written here.
"""

from __future__ import annotations

import plistlib
from collections.abc import Sequence
from dataclasses import dataclass

APP_ID = "anyfill"
"""The desktop file id (``anyfill.desktop``), icon name and systemd unit name."""
MAC_LABEL = "io.github.anyfill"
"""The LaunchAgent label and the macOS bundle identifier."""
NAME = "anyfill"
GENERIC_NAME = "Fill-in-the-middle completion"
COMMENT = "Complete text at the caret of any application with a local or cloud model"
UNIT_NAME = f"{APP_ID}.service"
WINDOWS_RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
# A broken configuration exits 2: restarting cannot fix it, the user must.
EXIT_CONFIG = 2

# Characters that force quoting in a desktop entry's Exec (Desktop Entry spec, "The Exec key").
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def desktop_exec(argv: Sequence[str]) -> str:
    """``argv`` as the value of a desktop entry's ``Exec`` key.

    Quoted per the spec's Exec rules, then escaped again as a desktop-file string (so a
    backslash is written four times), and ``%`` doubled so no field code appears.
    """
    words = []
    for arg in argv:
        if arg and not (_EXEC_RESERVED & set(arg)):
            word = arg
        else:
            inner = "".join("\\" + c if c in '"`$\\' else c for c in arg)
            word = f'"{inner}"'
        words.append(word.replace("\\", "\\\\").replace("%", "%%"))
    return " ".join(words)


def systemd_exec(argv: Sequence[str]) -> str:
    """``argv`` as a systemd ``ExecStart=`` command line (specifiers and variables escaped)."""
    words = []
    for arg in argv:
        escaped = arg.replace("%", "%%").replace("$", "$$")
        if escaped and not any(c in escaped for c in " \t\n\"'\\;"):
            words.append(escaped)
        else:
            words.append('"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return " ".join(words)


def windows_command(argv: Sequence[str]) -> str:
    """``argv`` as one Windows command line (the quoting ``CommandLineToArgvW`` undoes)."""
    import subprocess

    return subprocess.list2cmdline(list(argv))


def _desktop_entry(argv: Sequence[str], extra: Sequence[str]) -> str:
    lines = [
        "[Desktop Entry]",
        "Type=Application",
        f"Name={NAME}",
        f"GenericName={GENERIC_NAME}",
        f"Comment={COMMENT}",
        f"Exec={desktop_exec(argv)}",
        f"Icon={APP_ID}",
        "Terminal=false",
        *extra,
    ]
    return "\n".join(lines) + "\n"


def desktop_launcher(argv: Sequence[str]) -> str:
    """The application menu's entry (``~/.local/share/applications/anyfill.desktop``).

    Starting it while anyfill runs opens the settings of the running tray.
    """
    return _desktop_entry(
        argv,
        [
            "Categories=Utility;TextTools;",
            "Keywords=completion;autocomplete;fill-in-the-middle;FIM;LLM;AI;",
            "StartupNotify=false",
        ],
    )


def xdg_autostart(argv: Sequence[str]) -> str:
    """The XDG autostart entry (``~/.config/autostart/anyfill.desktop``)."""
    return _desktop_entry(
        argv,
        [
            # Autostart entries are not menu entries.
            "NoDisplay=true",
            "X-GNOME-Autostart-enabled=true",
        ],
    )


def systemd_unit(argv: Sequence[str]) -> str:
    """A systemd ``--user`` unit that starts with the graphical session.

    Bound to ``graphical-session.target``, not ``default.target``: the latter can start
    before the desktop has imported ``DISPLAY``/``WAYLAND_DISPLAY`` into the user manager.
    """
    return "\n".join(
        [
            "[Unit]",
            f"Description={NAME}: {GENERIC_NAME.lower()} at the caret",
            "Documentation=https://example.invalid/anyfill/docs",
            "PartOf=graphical-session.target",
            "After=graphical-session.target",
            # Five failed starts within a minute: give up instead of looping.
            "StartLimitIntervalSec=60",
            "StartLimitBurst=5",
            "",
            "[Service]",
            "Type=exec",
            f"ExecStart={systemd_exec(argv)}",
            "Restart=on-failure",
            "RestartSec=3",
            f"RestartPreventExitStatus={EXIT_CONFIG}",
            "",
            "[Install]",
            "WantedBy=graphical-session.target",
            "",
        ]
    )


@dataclass(frozen=True)
class RunEntry:
    """A value under ``HKEY_CURRENT_USER\\<key>``: Windows starts ``command`` at log-on."""

    key: str
    name: str
    command: str

    def as_reg_file(self) -> str:
        """The same entry as a ``.reg`` file (what ``reg import`` reads)."""
        command = self.command.replace("\\", "\\\\").replace('"', '\\"')
        return (
            "Windows Registry Editor Version 5.00\r\n\r\n"
            f"[HKEY_CURRENT_USER\\{self.key}]\r\n"
            f'"{self.name}"="{command}"\r\n'
        )


def windows_run_entry(argv: Sequence[str]) -> RunEntry:
    return RunEntry(WINDOWS_RUN_KEY, NAME, windows_command(argv))


def launch_agent(argv: Sequence[str], path: str, log_file: str | None = None) -> bytes:
    """The macOS LaunchAgent (``~/Library/LaunchAgents/io.github.anyfill.plist``).

    ``path`` becomes the agent's ``PATH``: launchd starts agents with a minimal one.
    ``KeepAlive.SuccessfulExit=false`` restarts it after a crash, not after Quit.
    """
    agent: dict[str, object] = {
        "Label": MAC_LABEL,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 10,
        "ProcessType": "Interactive",
        "LimitLoadToSessionType": "Aqua",
        "EnvironmentVariables": {"PATH": path},
    }
    if log_file:
        agent["StandardOutPath"] = log_file
        agent["StandardErrorPath"] = log_file
    return plistlib.dumps(agent, sort_keys=True)


def mac_info_plist(version: str) -> dict[str, object]:
    """The Info.plist keys of a macOS app bundle: ``LSUIElement`` keeps the tray app out of
    the Dock and the app switcher."""
    return {
        "CFBundleIdentifier": MAC_LABEL,
        "CFBundleName": NAME,
        "CFBundleDisplayName": NAME,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "LSUIElement": True,
        "NSHighResolutionCapable": True,
    }

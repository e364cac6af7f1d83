"""Autostart on Linux: an XDG autostart entry (the default: every desktop reads it), or a
systemd ``--user`` unit bound to ``graphical-session.target``; plus the menu launcher and
the icons, which ``enable`` installs either way and ``disable`` leaves in place.
"""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from anyfill.daemon.autostart import entries
from anyfill.daemon.autostart.files import Manifest, Plan, State, state_of
from anyfill.daemon.autostart.status import AutostartStatus, Entry

Method = Literal["xdg", "systemd"]
METHODS: tuple[Method, ...] = ("xdg", "systemd")
TARGET = "graphical-session.target"


def _xdg_dir(environ: Mapping[str, str], variable: str, default: str) -> Path:
    value = environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path(environ.get("HOME") or Path.home()) / default


@dataclass(frozen=True)
class LinuxPaths:
    config_home: Path
    data_home: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LinuxPaths:
        env = os.environ if environ is None else environ
        return cls(
            _xdg_dir(env, "XDG_CONFIG_HOME", ".config"),
            _xdg_dir(env, "XDG_DATA_HOME", ".local/share"),
        )

    @property
    def autostart(self) -> Path:
        return self.config_home / "autostart" / f"{entries.APP_ID}.desktop"

    @property
    def unit(self) -> Path:
        return self.config_home / "systemd" / "user" / entries.UNIT_NAME

    @property
    def wants_link(self) -> Path:
        return self.config_home / "systemd" / "user" / f"{TARGET}.wants" / entries.UNIT_NAME

    @property
    def launcher(self) -> Path:
        return self.data_home / "applications" / f"{entries.APP_ID}.desktop"

    @property
    def icons(self) -> Path:
        return self.data_home / "icons" / "hicolor"

    @property
    def manifest(self) -> Path:
        return self.data_home / "anyfill" / "autostart.json"


def shipped_icons() -> dict[str, bytes]:
    """The icons in the wheel (``anyfill.assets``), by path under ``hicolor/``."""
    root = resources.files("anyfill.assets") / "icons" / "hicolor"
    found: dict[str, bytes] = {}
    for size in sorted(root.iterdir(), key=lambda entry: entry.name):
        apps = size / "apps"
        if not apps.is_dir():
            continue
        for icon in sorted(apps.iterdir(), key=lambda entry: entry.name):
            if icon.name.startswith(entries.APP_ID + "."):
                found[f"{size.name}/apps/{icon.name}"] = icon.read_bytes()
    return found


class LinuxAutostart:
    def __init__(self, argv: Sequence[str], environ: Mapping[str, str] | None = None) -> None:
        self.argv = tuple(argv)
        self.environ = os.environ if environ is None else environ
        self.paths = LinuxPaths.from_env(self.environ)
        self.manifest = Manifest(self.paths.manifest)

    def _content(self, method: Method) -> tuple[Path, bytes]:
        if method == "xdg":
            return self.paths.autostart, entries.xdg_autostart(self.argv).encode()
        return self.paths.unit, entries.systemd_unit(self.argv).encode()

    def current_method(self) -> Method:
        """The method already in place (so a plain ``enable`` updates, never switches)."""
        unit_path, unit_data = self._content("systemd")
        if state_of(unit_path, unit_data, self.manifest) in ("current", "outdated"):
            return "systemd"
        return "xdg"

    def enable(self, method: Method | None = None, *, force: bool = False) -> list[str]:
        method = method or self.current_method()
        plan = Plan(self.manifest, force)
        path, data = self._content(method)
        plan.write(path, data)
        other: Method = "systemd" if method == "xdg" else "xdg"
        other_path = self._content(other)[0]
        if other_path.exists():
            plan.remove(other_path)  # both would start anyfill: the second one fails
        plan.write(self.paths.launcher, entries.desktop_launcher(self.argv).encode())
        for relative, icon in shipped_icons().items():
            plan.write(self.paths.icons / relative, icon)
        done = _icons_in_one_line(plan.apply(), self.paths.icons)
        done += self._wants_link(method == "systemd")
        if method == "systemd" or other_path in plan.removals:
            done += _systemctl_reload()
        if method == "systemd":
            done.append(
                f"anyfill starts with {TARGET} at your next log-in "
                f"('systemctl --user start {entries.UNIT_NAME}' starts it now)"
            )
        else:
            done.append("anyfill starts with your desktop session at your next log-in")
        return done

    def disable(self, *, force: bool = False) -> list[str]:
        plan = Plan(self.manifest, force)
        for method in METHODS:
            plan.remove(self._content(method)[0])
        done = plan.apply()
        had_unit = bool(self._wants_link(False))
        done += ["removed " + str(self.paths.wants_link)] if had_unit else []
        if had_unit or self.paths.unit in plan.removals:
            done += _systemctl_reload()
        if not plan.removals and not had_unit:
            done.append("autostart was already off")
        else:
            done.append("anyfill no longer starts with your session (the menu launcher stays)")
        return done

    def _wants_link(self, wanted: bool) -> list[str]:
        """``systemctl --user enable`` by hand: works with no user manager running too."""
        link = self.paths.wants_link
        target = Path("..") / entries.UNIT_NAME
        ours = link.is_symlink() and Path(os.readlink(link)) in (target, self.paths.unit)
        if wanted and not ours:
            if link.exists() or link.is_symlink():
                return [f"left {link} alone: it is not anyfill's link"]
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
            return [f"linked {link}"]
        if not wanted and ours:
            link.unlink()
            return [f"unlinked {link}"]
        return []

    def status(self) -> AutostartStatus:
        found: list[Entry] = []
        notes: list[str] = []
        xdg_path, xdg_data = self._content("xdg")
        xdg_state = state_of(xdg_path, xdg_data, self.manifest)
        if xdg_state != "absent":
            found.append(self._xdg_entry(xdg_path, xdg_state))
        unit_path, unit_data = self._content("systemd")
        unit_state = state_of(unit_path, unit_data, self.manifest)
        if unit_state != "absent":
            found.append(self._unit_entry(unit_path, unit_state))
        if len([e for e in found if not e.problem]) > 1:
            notes.append(
                "both an XDG entry and a systemd unit start anyfill: the second start "
                "fails ('anyfill autostart enable --method xdg' keeps one)"
            )
        launcher = state_of(
            self.paths.launcher, entries.desktop_launcher(self.argv).encode(), self.manifest
        )
        return AutostartStatus(found, launcher, shlex.join(self.argv), notes)

    def _xdg_entry(self, path: Path, state: State) -> Entry:
        problem = note = ""
        try:
            keys = _desktop_keys(path)
        except (OSError, configparser.Error, UnicodeDecodeError) as exc:
            return Entry("xdg", str(path), state, f"cannot read it ({exc})")
        if keys.get("Hidden", "").lower() == "true":
            problem = "turned off (Hidden=true), e.g. in your desktop's start-up settings"
        elif keys.get("X-GNOME-Autostart-enabled", "").lower() == "false":
            problem = "turned off in your desktop's start-up settings"
        else:
            problem = _missing_program(desktop_exec_argv(keys.get("Exec", "")))
        if state == "outdated":
            note = "written for another command: 'anyfill autostart enable' updates it"
        elif state in ("edited", "foreign"):
            note = "changed by you or your desktop: anyfill leaves it as it is"
        return Entry("xdg", str(path), state, problem, note)

    def _unit_entry(self, path: Path, state: State) -> Entry:
        note = ""
        try:
            exec_start = _unit_exec_start(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            return Entry("systemd", str(path), state, f"cannot read it ({exc})")
        problem = _missing_program(exec_start)
        if not problem and not self.paths.wants_link.is_symlink():
            problem = (
                f"not enabled: no link in {self.paths.wants_link.parent} "
                "('anyfill autostart enable --method systemd')"
            )
        if state == "outdated":
            note = "written for another command: 'anyfill autostart enable' updates it"
        elif state in ("edited", "foreign"):
            note = "changed by you: anyfill leaves it as it is"
        active = _systemctl("is-active", TARGET)
        if not problem and active is not None and active != "active":
            note = (
                f"{TARGET} is not active in this session ({active}): desktops without "
                "systemd session support never start the unit; '--method xdg' works there"
            )
        return Entry("systemd", str(path), state, problem, note)


def _icons_in_one_line(done: list[str], icons: Path) -> list[str]:
    """Ten icon sizes are one line of output, not ten."""
    prefix = str(icons) + os.sep
    kept: list[str] = []
    counts: dict[str, int] = {}
    for line in done:
        verb, _, path = line.partition(" ")
        if path.startswith(prefix) and " " not in path:
            counts[verb] = counts.get(verb, 0) + 1
        else:
            kept.append(line)
    kept += [f"{verb} {count} icons under {icons}" for verb, count in counts.items()]
    return kept


def desktop_exec_argv(value: str) -> list[str]:
    """A desktop entry's ``Exec`` value back to argv (field codes dropped)."""
    unescaped = value.replace("\\\\", "\x00").replace("\\s", " ").replace("\x00", "\\")
    words: list[str] = []
    word: list[str] | None = None
    quoted = escaped = False
    for char in unescaped:
        if escaped:
            word = (word or []) + [char]
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
            word = word or []
        elif char == " " and not quoted:
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            word = (word or []) + [char]
    if word is not None:
        words.append("".join(word))
    field_code = [w for w in words if len(w) == 2 and w[0] == "%" and w != "%%"]
    return [w.replace("%%", "%") for w in words if w not in field_code]


def _desktop_keys(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(encoding="utf-8"))
    if not parser.has_section("Desktop Entry"):
        return {}
    return dict(parser["Desktop Entry"])


def _unit_exec_start(text: str) -> list[str]:
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "ExecStart":
            try:
                words = shlex.split(value.strip().lstrip("-@:+!"))
            except ValueError:
                return []
            return [w.replace("%%", "%").replace("$$", "$") for w in words]
    return []


def _missing_program(argv: list[str]) -> str:
    if not argv:
        return "it names no command"
    program = argv[0]
    found = shutil.which(program) if not os.path.isabs(program) else program
    if found is None or not os.access(found, os.X_OK):
        return f"it starts {program}, which is missing: run 'anyfill autostart enable' again"
    return ""


def _systemctl(*args: str) -> str | None:
    """``systemctl --user ARGS``'s first output line; None when there is no user manager."""
    if shutil.which("systemctl") is None:
        return None
    try:
        result = subprocess.run(
            ["systemctl", "--user", *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "Failed to connect" in result.stderr or "No medium" in result.stderr:
        return None
    return (result.stdout.strip().splitlines() or [""])[0]


def _systemctl_reload() -> list[str]:
    if _systemctl("daemon-reload") is None:
        return ["no systemd user manager answers: it reads the unit at your next log-in"]
    return ["reloaded the systemd user manager"]

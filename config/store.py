"""Reading, validating and writing the TOML configuration file.

Errors name the file, the line and the key, what was expected and what was found.
Writes go through tomlkit so the user's comments and layout survive, and land
atomically (temporary file + rename) so a crash never leaves half a settings file.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs
import tomlkit
import tomlkit.exceptions
from pydantic import BaseModel, ValidationError

from anyfill.config.model import Settings
from anyfill.daemon.errors import ConfigError

APP_NAME = "anyfill"
ENV_PREFIX = "ANYFILL_"
ENV_CONFIG_PATH = "ANYFILL_CONFIG"

__all__ = [
    "ConfigProblem",
    "InvalidConfig",
    "default_config_path",
    "default_config_text",
    "load_settings",
    "parse_settings",
    "removed_default_backends",
    "shown_settings",
    "write_default_config",
]


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a configuration file."""

    key: str
    message: str
    line: int | None = None

    def render(self, path: str) -> str:
        where = f"{path}:{self.line}" if self.line else path
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class InvalidConfig(ConfigError):
    """A configuration file with one or more problems; ``problems`` lists each."""

    def __init__(self, path: str, problems: Sequence[ConfigProblem]) -> None:
        self.problems = list(problems)
        first = self.problems[0] if self.problems else None
        summary = "; ".join(problem.render(path) for problem in self.problems)
        super().__init__(
            summary,
            line=first.line if first else None,
            key=first.key if first else None,
        )
        self.path = path


def default_config_path() -> Path:
    """The file used when neither ``--config`` nor ``ANYFILL_CONFIG`` names one."""
    override = os.environ.get(ENV_CONFIG_PATH)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.toml"


def default_config_text() -> str:
    """The commented default file shipped with the package."""
    return resources.files("anyfill.config").joinpath("default.toml").read_text("utf-8")


def write_default_config(path: Path, *, force: bool = False) -> Path:
    """Write the commented default file; never overwrites an existing file unless ``force``."""
    if path.exists() and not force:
        raise ConfigError(
            "a configuration file already exists; edit it, or pass --force to replace it",
            path=str(path),
        )
    atomic_write(path, default_config_text())
    return path


def atomic_write(path: Path, text: str) -> None:
    """Replace the file's content at once (temporary file + rename).

    A symbolic link is written through (its target is replaced, the link stays, so a
    dotfiles checkout the link points into is what changes), and an existing file keeps
    its permission bits (the temporary file is created 0600)."""
    if path.is_symlink():
        path = path.resolve()  # every hop followed; a dangling link names the file to create
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if mode is not None and hasattr(os, "fchmod"):  # Windows (before 3.13) has none
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def load_settings(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    missing_ok: bool = True,
) -> Settings:
    """Load the configuration file (defaults when it does not exist) and apply ``ANYFILL_*``.

    Raises :class:`InvalidConfig` naming every problem, never a bare traceback.
    """
    path = path or default_config_path()
    environ = os.environ if environ is None else environ
    if path.exists():
        text = read_config_text(path)
    elif missing_ok:
        text = ""
    else:
        raise ConfigError("no such file; create it with 'anyfill config init'", path=str(path))
    return parse_settings(text, path=str(path), environ=environ)


MAX_CONFIG_BYTES = 1024 * 1024
"""A settings file is a few kilobytes; anything this big is a mistake, and reading it all
(or a FIFO, or /dev/zero) would hang every command."""


def read_config_text(path: Path) -> str:
    """The file's text: a regular file of at most ``MAX_CONFIG_BYTES``, UTF-8 (a leading
    byte-order mark, as some Windows editors write, is dropped)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror}", path=str(path)) from exc
    # fstat before fdopen: Python refuses to wrap a directory (IsADirectoryError).
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ConfigError(
            "not a regular file (a directory, pipe or device); point --config or "
            "ANYFILL_CONFIG at a settings file",
            path=str(path),
        )
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"the file is {info.st_size / 2**20:.1f} MiB; a settings file is at most "
                f"{MAX_CONFIG_BYTES // 2**20} MiB (is this the right file?)",
                path=str(path),
            )
        try:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read the file: {exc.strerror}", path=str(path)) from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError("the file grew past 1 MiB while being read", path=str(path))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start} is not valid UTF-8)", path=str(path)
        ) from exc


def parse_settings(
    text: str, *, path: str = "<config>", environ: Mapping[str, str] | None = None
) -> Settings:
    text = text.removeprefix("\ufeff")  # a byte-order mark is no key
    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise InvalidConfig(
            path, [ConfigProblem("", f"not valid TOML: {exc}", line=exc.line)]
        ) from exc
    data: dict[str, Any] = document.unwrap()
    overrides = env_overrides(environ or {}, data)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = [
            problem_from_error(error, text, overrides) for error in exc.errors(include_url=False)
        ]
        raise InvalidConfig(path, _unique(problems)) from exc


def _unique(problems: Iterable[ConfigProblem]) -> list[ConfigProblem]:
    seen: set[ConfigProblem] = set()
    result = []
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            result.append(problem)
    return sorted(result, key=lambda problem: (problem.line or 0, problem.key))


def problem_from_error(
    error: Mapping[str, Any], text: str, overrides: Mapping[tuple[str | int, ...], str]
) -> ConfigProblem:
    loc: tuple[str | int, ...] = tuple(error.get("loc", ()))
    key = _dotted(loc)
    found = error.get("input")
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        message = f"unknown key '{loc[-1]}'"
        hint = _did_you_mean(loc)
        if hint:
            message += f" (did you mean '{hint}'?)"
    else:
        message = plain_message(error)
        shown = _shorten(repr(found))
        if kind != "missing" and not isinstance(found, dict | list) and shown not in message:
            message += f"; found {shown}"
    env_var = overrides.get(loc[: len(loc)]) or _override_for(loc, overrides)
    if env_var:
        return ConfigProblem(key, f"{message} (from environment variable {env_var})")
    return ConfigProblem(key, message, line=find_line(text, loc))


_URL_EXAMPLE = "write it like http://127.0.0.1:8080 or https://api.example.com"
_PLAIN: dict[str, str] = {
    "url_parsing": f"not a web address: {_URL_EXAMPLE}",
    "url_scheme": f"a web address starts with http:// or https://: {_URL_EXAMPLE}",
    "url_type": f"not a web address: {_URL_EXAMPLE}",
    "int_type": "a whole number is needed",
    "int_parsing": "a whole number is needed",
    "int_from_float": "a whole number is needed",
    "float_type": "a number is needed",
    "float_parsing": "a number is needed",
    "bool_type": "true or false is needed",
    "bool_parsing": "true or false is needed",
    "string_type": "text in quotes is needed",
    "list_type": 'a list is needed, like ["a", "b"]',
    "missing": "this key is needed",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "string_too_short": "must have at least {min_length} character(s)",
    "string_too_long": "must have at most {max_length} characters",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} items",
    "literal_error": "must be one of {expected}",
}


def plain_message(error: Mapping[str, Any]) -> str:
    """A validation error in words a user knows (pydantic says "Input should be a valid
    URL, relative URL without a base"); our own validators' messages are kept."""
    kind = str(error.get("type", ""))
    template = _PLAIN.get(kind)
    if template is not None:
        try:
            return template.format(**(error.get("ctx") or {}))
        except (KeyError, IndexError):
            pass
    return str(error.get("msg", "invalid value")).removeprefix("Value error, ")


def _shorten(text: str, limit: int = 80) -> str:
    """A value as shown in a message: a 10 MB mistake is not echoed in full."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}... ({len(text)} characters)"


def _override_for(
    loc: tuple[str | int, ...], overrides: Mapping[tuple[str | int, ...], str]
) -> str | None:
    for prefix, env_var in overrides.items():
        if loc[: len(prefix)] == prefix:
            return env_var
    return None


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _did_you_mean(loc: tuple[str | int, ...]) -> str | None:
    model: type[BaseModel] | None = Settings
    for part in loc[:-1]:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        model = _model_of(field.annotation) if field else None
    if model is None:
        return None
    matches = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found:
            return found
    return None


_TABLE = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=""")


def find_line(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line where the value at ``loc`` is written, as precisely as TOML allows.

    Walks the file tracking the current table (``[a.b]``, ``[[a]]`` with its index) and
    returns the key's own line; when the key is not written (missing value) returns the
    line of its table.
    """
    wanted = list(loc)
    array_counts: dict[tuple[str | int, ...], int] = {}
    current: tuple[str | int, ...] = ()
    best: int | None = None
    best_len = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        table = _TABLE.match(raw)
        if table and not _KEY.match(raw):
            names = tuple(_split_key(table.group(2)))
            if table.group(1) == "[[":
                index = array_counts.get(names, -1) + 1
                array_counts[names] = index
                current = (*_resolve(names, array_counts), index)
            else:
                current = tuple(_resolve(names, array_counts))
            if _is_prefix(current, wanted) and len(current) > best_len:
                best, best_len = number, len(current)
            continue
        key = _KEY.match(raw)
        if key:
            full = (*current, *_split_key(key.group(1)))
            if _is_prefix(full, wanted) and len(full) > best_len:
                best, best_len = number, len(full)
    return best


def _split_key(key: str) -> list[str]:
    return [part.strip().strip("\"'") for part in key.split(".")]


def _resolve(
    names: tuple[str, ...], array_counts: Mapping[tuple[str | int, ...], int]
) -> list[str | int]:
    # [backends.timeouts] after [[backends]] refers to the latest backends element.
    resolved: list[str | int] = []
    for i, name in enumerate(names):
        resolved.append(name)
        prefix = tuple(names[: i + 1])
        if i < len(names) - 1 and prefix in array_counts:
            resolved.append(array_counts[prefix])
    return resolved


def _is_prefix(candidate: Sequence[str | int], wanted: Sequence[str | int]) -> bool:
    return len(candidate) <= len(wanted) and list(candidate) == list(wanted[: len(candidate)])


def env_overrides(
    environ: Mapping[str, str], data: dict[str, Any]
) -> dict[tuple[str | int, ...], str]:
    """Apply ``ANYFILL_<SECTION>__<KEY>=value`` to ``data`` in place; return what was set.

    Backends are addressed by name: ``ANYFILL_BACKENDS__OLLAMA__URL``. Values are read as
    JSON when they parse (numbers, booleans, lists), else as plain strings.
    """
    applied: dict[tuple[str | int, ...], str] = {}
    for env_var in sorted(environ):
        if not env_var.startswith(ENV_PREFIX) or "__" not in env_var:
            continue
        parts = [part.lower() for part in env_var[len(ENV_PREFIX) :].split("__")]
        if not all(parts):
            continue
        value = _env_value(environ[env_var])
        loc = _apply_override(data, parts, value)
        if loc is None:
            raise ConfigError(
                f"environment variable {env_var} names no backend '{parts[1]}'; "
                "backends are addressed by name, e.g. ANYFILL_BACKENDS__OLLAMA__URL"
            )
        applied[loc] = env_var
    return applied


def _apply_override(
    data: dict[str, Any], parts: list[str], value: object
) -> tuple[str | int, ...] | None:
    if parts[0] == "backends" and len(parts) >= 3:
        backends = data.setdefault("backends", _default_backend_dicts())
        for index, backend in enumerate(backends):
            if isinstance(backend, dict) and str(backend.get("name", "")).lower() == parts[1]:
                _set_nested(backend, parts[2:], value)
                return ("backends", index, *parts[2:])
        return None
    _set_nested(data, parts, value)
    return tuple(parts)


def _default_backend_dicts() -> list[dict[str, Any]]:
    return [backend.model_dump() for backend in Settings().backends]


def _set_nested(target: dict[str, Any], parts: Sequence[str], value: object) -> None:
    for part in parts[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = {}
            target[part] = child
        target = child
    target[parts[-1]] = value


def _env_value(raw: str) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def set_value(path: Path, dotted_key: str, value: object) -> Settings:
    """Set one key in the file, keeping its comments; validates before writing anything."""
    text = read_config_text(path) if path.exists() else default_config_text()
    document = tomlkit.parse(text)
    parts = dotted_key.split(".")
    table: Any = document
    for part in parts[:-1]:
        if part not in table:
            table[part] = tomlkit.table()
        table = table[part]
    table[parts[-1]] = value
    new_text = tomlkit.dumps(document)
    settings = parse_settings(new_text, path=str(path), environ={})
    atomic_write(path, new_text)
    return settings


def _changed_backends(settings: Settings) -> list[dict[str, Any]]:
    """The backends as ``config show --changed`` tells them: a default backend left as it is
    is not shown, a changed one by its name and the keys that differ from its default, a
    new one by its name, type and the keys that differ from a backend's defaults. The
    managed server's placeholder URL (``url`` left out: a free port) is never shown."""
    from anyfill.config.model import MANAGED_DEFAULT_URL

    defaults = {backend.name: backend for backend in Settings().backends}
    shown = []
    for backend in settings.backends:
        mine = backend.model_dump(mode="json", exclude_none=True)
        default = defaults.get(backend.name)
        if default is not None:
            base = default.model_dump(mode="json", exclude_none=True)
            differ = {key: value for key, value in mine.items() if base.get(key) != value}
            if not differ:
                continue
        else:
            differ = backend.model_dump(mode="json", exclude_defaults=True, exclude_none=True)
            differ["type"] = backend.type
        if differ.get("url") == MANAGED_DEFAULT_URL and backend.type == "llamacpp-managed":
            del differ["url"]
        shown.append({"name": backend.name, **{k: v for k, v in differ.items() if k != "name"}})
    return shown


def removed_default_backends(settings: Settings) -> list[str]:
    """The default backends the file leaves out (``config show --changed`` names them)."""
    names = {backend.name for backend in settings.backends}
    return [backend.name for backend in Settings().backends if backend.name not in names]


_SECRET_NAME = re.compile(r"(?i)auth|key|token|secret|cookie|session|pass|signature|credential")


def shown_settings(settings: Settings, *, changed_only: bool = False) -> dict[str, Any]:
    """The settings as ``config show`` prints them: header and option values whose names
    look like credentials are masked (a terminal, a screen share or a bug report must not
    carry them)."""
    data = settings.model_dump(mode="json", exclude_defaults=changed_only, exclude_none=True)
    if changed_only:
        changed = _changed_backends(settings)
        if changed:
            data["backends"] = changed
        else:
            data.pop("backends", None)
    for backend in data.get("backends", []):
        for table in ("headers", "options"):
            values = backend.get(table)
            if isinstance(values, dict):
                for name, value in values.items():
                    if _SECRET_NAME.search(name) and isinstance(value, str) and value:
                        values[name] = "***"
    return data

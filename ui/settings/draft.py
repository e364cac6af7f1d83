"""The settings being edited: a plain copy of the file's data, validated on every change.

Every page reads and writes the draft by key path (``("backends", 0, "url")``); after each
change the whole draft is validated by the same pydantic models as the file, and each
problem is reported under its dotted key (``backends[0].url``) in the words of
``anyfill config validate``. Save is possible only while there is no problem.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from anyfill.config.edit import problems_of, save_settings
from anyfill.config.model import AppRule, Settings
from anyfill.config.store import default_config_text, parse_settings
from anyfill.daemon.errors import AnyfillError, ConfigError

KeyPath = tuple[str | int, ...]
MANAGED_TYPE = "llamacpp-managed"


def dotted(path: Sequence[str | int]) -> str:
    """``("backends", 0, "url")`` -> ``backends[0].url`` (the key of ``config validate``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def empty_rule() -> dict[str, Any]:
    """A new per-application rule as the draft holds it (every field, unset)."""
    return AppRule(match=".").model_dump(mode="json") | {"match": ""}


def load_for_editing(path: Path) -> Settings:
    """The file's own settings, without ``ANYFILL_*`` overrides (those never get saved)."""
    text = path.read_text("utf-8") if path.exists() else default_config_text()
    return parse_settings(text, path=str(path), environ={})


class NotSaved(ConfigError):
    """A save failed; says why and exactly what was kept (the file is never half-written)."""

    def __init__(self, cause: BaseException, stored: Sequence[str]) -> None:
        reason = str(cause)
        if isinstance(cause, OSError) and not isinstance(cause, AnyfillError):
            reason = f"cannot write the file: {cause.strerror or cause}"
        if stored:
            names = ", ".join(f"'{name}'" for name in stored)
            kept = f"the file is unchanged; the API key for {names} is in the keyring"
        else:
            kept = "nothing was changed"
        super().__init__(f"{reason} ({kept})")


class ChangedOnDisk(ConfigError):
    """The file changed on disk since the panel read it."""

    def __init__(self, path: str) -> None:
        super().__init__(
            "another program changed the file since the settings window read it", path=path
        )


class Draft(QObject):
    """The settings being edited. ``changed`` after every edit; ``problems`` maps each
    dotted key with a problem to its message ('' holds problems of the whole file)."""

    changed = Signal()
    reloaded = Signal()
    """The whole draft was replaced (revert, reset to defaults, saved): re-read every field."""

    def __init__(self, path: Path, saved: Settings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.path = path
        self.saved = saved
        self.data: dict[str, Any] = saved.model_dump(mode="json")
        self.origins: list[str | None] = [b.name for b in saved.backends]
        """For each backend of the draft, its name in the file (None: added here), so a
        renamed backend keeps its table and comments."""
        self.problems: dict[str, str] = {}
        self.typed_keys: list[str] = ["" for _ in saved.backends]
        """API keys typed for each backend, stored in the keyring on save, never in the file."""

    # -- reading and writing ----------------------------------------------------------

    def get(self, path: KeyPath) -> Any:
        node: Any = self.data
        for part in path:
            node = node[part]
        return node

    def set(self, path: KeyPath, value: Any) -> None:
        node: Any = self.data
        for part in path[:-1]:
            node = node[part]
        if node[path[-1]] == value:
            return
        node[path[-1]] = value
        self.touch()

    def touch(self) -> None:
        """Re-validate after an edit made directly to :attr:`data`."""
        self.problems = {}
        for problem in problems_of(self.data):
            self.problems.setdefault(problem.key, problem.message)
        self.changed.emit()

    def problem(self, path: KeyPath) -> str:
        return self.problems.get(dotted(path), "")

    def problems_under(self, path: KeyPath) -> dict[str, str]:
        prefix = dotted(path)
        return {
            key: message
            for key, message in self.problems.items()
            if key == prefix or key.startswith((prefix + ".", prefix + "["))
        }

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def dirty(self) -> bool:
        return any(self.typed_keys) or self.data != self.saved.model_dump(mode="json")

    def settings(self) -> Settings:
        return Settings.model_validate(copy.deepcopy(self.data))

    # -- backends: renames follow their name everywhere ------------------------------

    def rename_backend(self, index: int, new_name: str) -> None:
        old = self.data["backends"][index]["name"]
        self.data["backends"][index]["name"] = new_name
        if old != new_name:
            routing = self.data["routing"]["default"]
            routing[:] = [new_name if name == old else name for name in routing]
            for rule in self.data["insert"]["apps"]:
                if rule.get("backends"):
                    rule["backends"] = [new_name if n == old else n for n in rule["backends"]]
        self.touch()

    def set_enabled(self, index: int, enabled: bool) -> None:
        """A disabled backend leaves the default chain (a chain naming it would fail every
        request); enabled again, it rejoins at its place in the list."""
        backend = self.data["backends"][index]
        backend["enabled"] = enabled
        routing = self.data["routing"]["default"]
        if not enabled:
            routing[:] = [name for name in routing if name != backend["name"]]
        elif backend["name"] not in routing:
            routing.append(backend["name"])
            self._sort_chain()
        self.touch()

    def unique_backend_name(self, wanted: str) -> str:
        names = {b["name"] for b in self.data["backends"]}
        if wanted not in names:
            return wanted
        number = 2
        while f"{wanted}-{number}" in names:
            number += 1
        return f"{wanted}-{number}"

    def add_backend(self, backend: dict[str, Any], *, at: int | None = None) -> int:
        """Add ``backend`` at ``at``; by default last, but before the managed servers at the
        end of the list: those are the fallback anyfill runs itself, and a backend after
        them would never be asked while they work."""
        backends = self.data["backends"]
        index = len(backends) if at is None else at
        if at is None and backend.get("type") != MANAGED_TYPE:
            while index > 0 and backends[index - 1].get("type") == MANAGED_TYPE:
                index -= 1
        backend["name"] = self.unique_backend_name(str(backend["name"]))
        backends.insert(index, backend)
        self.origins.insert(index, None)
        self.typed_keys.insert(index, "")
        if backend.get("enabled", True):
            self.data["routing"]["default"].append(backend["name"])
            self._sort_chain()
        self.touch()
        return index

    def remove_backend(self, index: int) -> None:
        removed = self.data["backends"].pop(index)
        self.origins.pop(index)
        self.typed_keys.pop(index)
        name = removed["name"]
        routing = self.data["routing"]["default"]
        routing[:] = [n for n in routing if n != name]
        for rule in self.data["insert"]["apps"]:
            if rule.get("backends") and name in rule["backends"]:
                rule["backends"] = [n for n in rule["backends"] if n != name] or None
        self.touch()

    def move_backend(self, index: int, to: int) -> None:
        backends = self.data["backends"]
        if not 0 <= to < len(backends) or to == index:
            return
        backends.insert(to, backends.pop(index))
        self.origins.insert(to, self.origins.pop(index))
        self.typed_keys.insert(to, self.typed_keys.pop(index))
        self._sort_chain()
        self.touch()

    def effective_chain(self) -> list[str]:
        """The backends a completion asks, in order (``routing.default``, enabled ones)."""
        enabled = {b["name"] for b in self.data["backends"] if b.get("enabled", True)}
        return [name for name in self.data["routing"]["default"] if name in enabled]

    def _sort_chain(self) -> None:
        """The default chain follows the order of the backends list."""
        order = {b["name"]: i for i, b in enumerate(self.data["backends"])}
        routing = self.data["routing"]["default"]
        routing.sort(key=lambda name: order.get(name, len(order)))

    # -- whole-draft operations -------------------------------------------------------

    def replace(self, settings: Settings, *, keep_origins: bool = True) -> None:
        self.data = settings.model_dump(mode="json")
        if not keep_origins:
            self.origins = [b.name for b in settings.backends]
        else:
            # Reset to defaults: names that exist in the file keep their tables.
            saved_names = {b.name for b in self.saved.backends}
            self.origins = [b.name if b.name in saved_names else None for b in settings.backends]
        self.typed_keys = ["" for _ in settings.backends]
        self.touch()
        self.reloaded.emit()

    def reload_from_disk(self) -> None:
        """Show the file as it is now; changes made here are dropped."""
        self.saved = load_for_editing(self.path)
        self.replace(self.saved, keep_origins=False)

    def revert(self) -> None:
        self.replace(self.saved, keep_origins=False)

    def save(self, *, overwrite: bool = False) -> Settings:
        """Write the changed keys to the file (atomically) and the typed keys to the keyring.

        Raises :class:`ChangedOnDisk` when another program changed the file since it was
        read (an editor, a second panel): ``overwrite`` then writes these settings over it,
        still keeping its comments; without it nothing is written.
        """
        from anyfill.config.secrets import move_api_key, store_api_key

        after = self.settings()
        on_disk = load_for_editing(self.path)  # InvalidConfig: a broken file is not guessed at
        before = self.saved
        if on_disk != self.saved:
            if not overwrite:
                raise ChangedOnDisk(str(self.path))
            before = on_disk  # the tables to keep are those the file holds now
        renamed = {
            backend.name: origin
            for backend, origin in zip(after.backends, self.origins, strict=True)
            if origin is not None and origin != backend.name
        }
        # The keyring first, the file last: a keyring that refuses leaves the file as it
        # was (so "Not saved" is true, and the next Save sees no change on disk), and the
        # keys moved so far go back.
        moved: list[tuple[str, str]] = []
        stored: list[str] = []
        try:
            for new_name, old_name in renamed.items():
                if move_api_key(old_name, new_name):
                    moved.append((old_name, new_name))
            for backend, key in zip(after.backends, self.typed_keys, strict=True):
                if key.strip():
                    store_api_key(backend.name, key)
                    stored.append(backend.name)
            saved = save_settings(self.path, before, after, renamed)
        except (AnyfillError, OSError) as exc:
            for old_name, new_name in reversed(moved):
                with contextlib.suppress(AnyfillError):
                    move_api_key(new_name, old_name)
            raise NotSaved(exc, stored) from exc
        self.saved = saved
        self.typed_keys = ["" for _ in saved.backends]
        self.origins = [b.name for b in saved.backends]
        self.data = saved.model_dump(mode="json")
        self.touch()
        self.reloaded.emit()
        return saved

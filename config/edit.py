"""Saving settings edited elsewhere (the settings panel) back into the user's TOML file.

Only the keys whose value changed are written: the user's comments, key order and the keys
they never wrote stay as they were. A value that goes back to what the file does not say
(the default) is still written only if it differs from what the file meant before. Arrays of
tables (``[[backends]]``, ``[[insert.apps]]``) keep each element's own table, and with it
its comments, matched by the element's identity (a backend's name, a rule's position).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from tomlkit.container import Container
from tomlkit.items import AoT, Comment, Table, Whitespace

from anyfill.config.model import AppRule, BackendConfig, Settings
from anyfill.config.store import (
    ConfigProblem,
    atomic_write,
    default_config_text,
    parse_settings,
    problem_from_error,
)

Trivia = Comment | Whitespace

__all__ = ["problems_of", "render_changes", "save_settings"]


def problems_of(data: Mapping[str, Any]) -> list[ConfigProblem]:
    """Every problem of ``data`` (a dumped :class:`Settings`), in ``config validate``'s words."""
    try:
        Settings.model_validate(dict(data))
    except ValidationError as exc:
        return [problem_from_error(error, "", {}) for error in exc.errors(include_url=False)]
    return []


def render_changes(
    text: str,
    before: Settings,
    after: Settings,
    renamed: Mapping[str, str] | None = None,
) -> str:
    """``text`` with the keys that differ between ``before`` and ``after`` rewritten.

    ``before`` is what ``text`` means (without environment overrides); ``renamed`` maps a
    backend's new name to its old one so its table, and its comments, are kept.
    """
    document = tomlkit.parse(text)
    old = _dump(before)
    new = _dump(after)
    _merge_table(document, old, new, renamed or {})
    return tomlkit.dumps(document)


def save_settings(
    path: Path, before: Settings, after: Settings, renamed: Mapping[str, str] | None = None
) -> Settings:
    """Write ``after`` into ``path`` changing only what differs from ``before``; atomic.

    The new text is validated exactly as the daemon will read it before anything is written.
    """
    text = path.read_text("utf-8") if path.exists() else default_config_text()
    new_text = render_changes(text, before, after, renamed)
    settings = parse_settings(new_text, path=str(path), environ={})
    atomic_write(path, new_text)
    return settings


def _dump(settings: Settings) -> dict[str, Any]:
    return settings.model_dump(mode="json")


def _merge_table(
    table: Any, old: Mapping[str, Any], new: Mapping[str, Any], renamed: Mapping[str, str]
) -> None:
    for key in old:
        if key not in new and key in table:
            del table[key]  # a free-form map (headers, options) lost an entry
    for key, value in new.items():
        before = old.get(key)
        if value == before:
            continue
        if isinstance(value, dict):
            if key not in table:
                _add(table, key, tomlkit.table(), after_keys=False)
            _merge_table(table[key], before if isinstance(before, dict) else {}, value, renamed)
        elif _is_table_list(value) or _is_table_list(before):
            _merge_table_list(table, key, before or [], value, renamed)
        elif value is None:
            if key in table:
                del table[key]
        elif key in table:
            table[key] = value  # tomlkit keeps the line's comment
        else:
            _add(table, key, tomlkit.item(value), after_keys=True)


def _body(table: Any) -> list[tuple[Any, Any]]:
    container = table if isinstance(table, Container) else table.value
    body: list[tuple[Any, Any]] = container.body
    return body


def _add(table: Any, key: str, item: Any, *, after_keys: bool) -> None:
    """Add ``key`` where a person would write it: a plain key after the table's last plain
    key (before its sub-tables), a sub-table before the comments that end the table (they
    usually introduce the next section)."""
    container = table if isinstance(table, Container) else table.value
    body = _body(table)
    if after_keys:
        index = 0
        for position, (name, value) in enumerate(body):
            if name is not None and not isinstance(value, Table | AoT):
                index = position + 1
    else:
        index = _trailing_start(body)
    if index >= len(body):
        table[key] = item
    else:
        container._insert_at(index, key, item)


def _trailing_start(body: list[tuple[Any, Any]]) -> int:
    index = len(body)
    while index > 0 and body[index - 1][0] is None and isinstance(body[index - 1][1], Trivia):
        index -= 1
    return index


def _is_table_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _merge_table_list(
    table: Any,
    key: str,
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    renamed: Mapping[str, str],
) -> None:
    written = table.get(key)
    existing: list[Any] = list(written) if written is not None else []
    by_identity: dict[object, tuple[Any, Mapping[str, Any]]] = {}
    for index, element in enumerate(old):
        old_identity = element.get("name", index)
        # The file may hold fewer tables than the defaults when it never wrote the array.
        by_identity[old_identity] = (existing[index] if index < len(existing) else None, element)
    tables: list[Any] = []
    for index, element in enumerate(new):
        identity: object = index
        if "name" in element:
            identity = renamed.get(element["name"], element["name"])
        kept, before = by_identity.get(identity, (None, {}))
        if kept is None:
            # A new table: its required keys and what differs from the defaults.
            kept, before = tomlkit.table(), _field_defaults(_ELEMENT_MODELS.get(key))
            _merge_table(kept, before, element, renamed)
            _body(kept).append((None, Whitespace("\n")))
        else:
            _merge_table(kept, before, element, renamed)
        tables.append(kept)
    if not tables:
        if key in table:
            del table[key]
        table[key] = tomlkit.array()
        return
    _keep_trailing_comments_last(tables, existing[-1] if existing else None)
    if isinstance(written, AoT):
        # In place: a new AoT would add blank lines between the user's tables.
        written._body[:] = tables
    else:
        array = tomlkit.aot()
        for element_table in tables:
            array.append(element_table)
        table[key] = array


def _keep_trailing_comments_last(tables: list[Any], original_last: Any) -> None:
    """The comments after the array's last table introduce what follows the array (the next
    section): when another table is now last, they move to it. Comments after any other
    table introduce the table after it and stay where they are."""
    if original_last is None or not tables or tables[-1] is original_last:
        return
    if not any(table is original_last for table in tables):
        return  # removed: its trailing comments went with it, as its own lines did
    body = _innermost_body(original_last)
    start = _trailing_start(body)
    trailing = body[start:]
    if not any(isinstance(item, Comment) for _, item in trailing):
        return
    del body[start:]
    body.append((None, Whitespace("\n")))
    last = _innermost_body(tables[-1])
    del last[_trailing_start(last) :]
    last.extend(trailing)


def _innermost_body(table: Any) -> list[tuple[Any, Any]]:
    """The body the text after ``table`` belongs to: a ``[backends.server]`` written last
    inside a ``[[backends]]`` holds the comments that follow it."""
    body = _body(table)
    while body and body[-1][0] is not None and isinstance(body[-1][1], Table):
        body = _body(body[-1][1])
    return body


_ELEMENT_MODELS: dict[str, type[BaseModel]] = {"backends": BackendConfig, "apps": AppRule}


def _field_defaults(model: type[BaseModel] | None) -> dict[str, Any]:
    if model is None:
        return {}
    defaults: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if not field.is_required():
            defaults[name] = to_jsonable_python(field.get_default(call_default_factory=True))
    return defaults

"""Per-application settings: the first ``[[insert.apps]]`` rule whose pattern matches wins.

A rule matches when its class pattern (``match``) is found (``re.search``) in the window
class, the window instance or the process name, and its ``title`` pattern in the window
title; an empty pattern matches every window. Unset fields of the rule fall back to the
global ``[insert]`` / ``[capture]`` settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from anyfill.config.model import AppRule, CaptureStrategy, InsertConfig, InsertMode
from anyfill.daemon.desktop.ports import Target


@dataclass(frozen=True)
class AppSettings:
    """What applies to one target after rules and defaults are merged."""

    disabled: bool
    mode: InsertMode
    capture: tuple[CaptureStrategy, ...]
    paste_keys: str
    copy_keys: str
    backends: tuple[str, ...]
    """The backend chain for this app; empty: ``routing.default``."""
    rule: str
    """The pattern of the rule that matched ('' when none did), for logs and messages."""
    read_fields: bool = False
    """Whether the capture also reads the window's other text fields (context source)."""
    suggest: bool | None = None
    """Suggestions as you type here: the rule's ``suggest``; None: ``suggestions.auto``."""


def resolve(
    target: Target, insert: InsertConfig, default_capture: list[CaptureStrategy]
) -> AppSettings:
    rule = matching_rule(target, insert.apps)
    return AppSettings(
        disabled=rule.disabled if rule else False,
        mode=(rule.mode if rule and rule.mode else insert.mode),
        capture=tuple(rule.capture if rule and rule.capture else default_capture),
        paste_keys=(rule.paste_keys if rule and rule.paste_keys else insert.paste_keys),
        copy_keys=(rule.copy_keys if rule and rule.copy_keys else insert.copy_keys),
        backends=tuple(rule.backends or ()) if rule else (),
        suggest=rule.suggest if rule else None,
        rule=(rule.match or f"title {rule.title}") if rule else "",
    )


def matching_rule(target: Target, rules: list[AppRule]) -> AppRule | None:
    for rule in rules:
        if rule.match and not any(re.search(rule.match, name) for name in target.names):
            continue
        if rule.title and not re.search(rule.title, target.title):
            continue
        return rule
    return None

"""Per-application settings: the first ``[[insert.apps]]`` rule whose pattern matches wins.

A rule matches when its regular expression matches (``re.search``) the window class,
the window instance or the process name. Unset fields of the rule fall back to the
global ``[insert]`` / ``[capture]`` settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from anyfill.config.model import AppRule, CaptureStrategy, InsertConfig, InsertMode
from anyfill.daemon.desktop import Target


@dataclass(frozen=True)
class AppSettings:
    """What applies to one target after rules and defaults are merged."""

    disabled: bool
    mode: InsertMode
    capture: tuple[CaptureStrategy, ...]
    paste_keys: str
    copy_keys: str
    rule: str
    """The pattern of the rule that matched ('' when none did), for logs and messages."""


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
        rule=rule.match if rule else "",
    )


def matching_rule(target: Target, rules: list[AppRule]) -> AppRule | None:
    for rule in rules:
        pattern = re.compile(rule.match)
        if any(pattern.search(name) for name in target.names):
            return rule
    return None

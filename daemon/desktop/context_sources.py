"""Context beyond the caret for one press: which sources apply, and the chunks they give.

Sources (``[context]``, docs/context.md): the application name and window title (the
chunks' names and the document's file name), the window's other text fields (read by the
capture over AT-SPI), completions recently accepted in the same application, and, only
when the user turns it on, recent clipboard text. Privacy comes first: password managers
and password fields give and get nothing, ever; terminals never send their title; a
per-app rule (``[[insert.apps]]`` ``context_*``) turns any source off for that app.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from anyfill.config.model import ContextConfig, Settings
from anyfill.daemon.context import Context
from anyfill.daemon.desktop import apprules
from anyfill.daemon.desktop.context_ring import Chunk, ChunkRing
from anyfill.daemon.desktop.ports import Target
from anyfill.daemon.settings.live import Reader, reader

__all__ = ["ContextMemory", "Sources", "looks_secret", "resolve_sources", "with_context"]

PASSWORD_HINT = "x-kde-passwordManagerHint"
"""The clipboard format password managers (KeePassXC, KDE) add to a copied secret."""
_ONE_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Sources:
    """The sources that apply to one target."""

    title: bool = False
    fields: bool = False
    accepted: bool = False
    clipboard: bool = False

    @property
    def any(self) -> bool:
        return self.title or self.fields or self.accepted or self.clipboard


NONE = Sources()


def _listed(target: Target, names: Iterable[str]) -> bool:
    wanted = {name.lower() for name in names}
    return any(name.lower() in wanted for name in target.names)


def resolve_sources(target: Target, settings: Settings, *, secure: bool = False) -> Sources:
    """Which sources apply to ``target``. ``secure``: the caret is in a password field."""
    config = settings.context
    if not config.enabled or secure or _listed(target, config.password_managers):
        return NONE
    rule = apprules.matching_rule(target, settings.insert.apps)

    def allowed(on: bool, by_rule: bool | None) -> bool:
        return on and by_rule is not False  # a rule turns a source off, never on

    return Sources(
        title=allowed(config.title, rule.context_title if rule else None)
        and not _listed(target, config.terminals),
        fields=allowed(config.fields, rule.context_fields if rule else None),
        accepted=allowed(config.accepted, rule.context_accepted if rule else None),
        clipboard=allowed(config.clipboard, rule.context_clipboard if rule else None),
    )


def looks_secret(text: str) -> bool:
    """One word with no spaces (a password, a token, a key): never sent as clipboard text."""
    return _ONE_WORD.fullmatch(text.strip()) is not None


class ContextMemory:
    """What outlives a press: each application's accepted completions and recent clipboard
    texts, as rings of chunks. Held in memory only, never written anywhere."""

    def __init__(self, config: ContextConfig | Reader[ContextConfig]) -> None:
        self._read_config = reader(config)
        self._accepted: dict[str, ChunkRing] = {}
        self._clipboard = self._ring()

    @property
    def config(self) -> ContextConfig:
        return self._read_config()  # the settings in force now

    def _ring(self) -> ChunkRing:
        return ChunkRing(self.config.max_chunks, self.config.chunk_lines)

    @staticmethod
    def _app(target: Target) -> str:
        return target.app or target.process or "?"

    def remember_accepted(self, target: Target, prefix: str, middle: str) -> None:
        """A completion the user kept, with its line's start: how this user writes here."""
        line_start = prefix[prefix.rfind("\n") + 1 :]
        ring = self._accepted.setdefault(self._app(target), self._ring())
        ring.add("accepted", line_start + middle)

    def remember_clipboard(self, text: str | None) -> None:
        if text and text.strip() and not looks_secret(text):
            self._clipboard.add("clipboard", text)

    def accepted(self, target: Target) -> tuple[Chunk, ...]:
        ring = self._accepted.get(self._app(target))
        return ring.chunks() if ring is not None else ()

    def clipboard(self) -> tuple[Chunk, ...]:
        return self._clipboard.chunks()

    def forget(self) -> None:
        self._accepted.clear()
        self._clipboard = self._ring()


def _window_name(target: Target, sources: Sources) -> str:
    app = target.app or target.process
    if not sources.title:
        return ""
    return f"{app}: {target.title}" if target.title else app


def with_context(
    context: Context, target: Target, sources: Sources, memory: ContextMemory
) -> Context:
    """``context`` with the chunks its sources give, within ``max_chars``; the prefix and
    suffix are untouched (they keep their own limits). The fields the capture read are
    dropped from the context either way: only what is sent stays."""
    config = memory.config
    window = _window_name(target, sources)
    ring = ChunkRing(config.max_chunks, config.chunk_lines)
    # Oldest and least related first: the ring keeps the newest, the fields stand last.
    if sources.clipboard:
        for chunk in memory.clipboard():
            ring.add(chunk.name, chunk.text)
    if sources.accepted:
        for chunk in memory.accepted(target):
            name = f"{window} (accepted)" if window else "accepted"
            ring.add(name, chunk.text)
    if sources.fields:
        for n, (label, text) in enumerate(context.fields, 1):
            field = label or f"field {n}"
            ring.add(f"{window} - {field}" if window else field, text)
    local = context.prefix[-2000:] + context.suffix[:2000]
    chunks = ring.select(local, config.max_chars)
    extra = tuple((chunk.name, chunk.text) for chunk in chunks)
    filename = context.filename or window
    return replace(context, extra=(*context.extra, *extra), filename=filename, fields=())

"""Recently answered completions, so asking again costs nothing.

Keyed by backend (name, model, template), the request's knobs, the head of the suffix and
the tail of the prefix: the text near the caret decides a FIM answer. Type-through: when
the user typed the first characters of a cached completion, the rest of it is still the
answer for the new caret position, so it is served without a request.

An exact repeat of an interactive request is *not* served from the cache: pressing the
hotkey again at the same place means "try again". Exact hits serve interactive requests
only with answers a prefetch fetched ahead (once).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from anyfill.daemon.backends.base import FimPrompt, Plan, Usage


@dataclass(frozen=True)
class CacheHit:
    text: str
    plan: Plan | None
    typed: int
    """How many characters of the cached completion the user typed since (0: exact hit)."""


@dataclass
class _Entry:
    prefix_tail: str
    text: str
    plan: Plan | None
    usage: Usage | None
    ahead: bool
    """Fetched ahead by a prefetch and not yet shown to the user."""


_Group = tuple[str, str, str, int, float, tuple[str, ...], bool, str]


class CompletionCache:
    """An LRU of completions with type-through reuse."""

    def __init__(
        self, max_entries: int = 256, prefix_chars: int = 1500, suffix_chars: int = 400
    ) -> None:
        self.max_entries = max_entries
        self.prefix_chars = prefix_chars
        self.suffix_chars = suffix_chars
        self._entries: OrderedDict[tuple[_Group, str], _Entry] = OrderedDict()
        self._groups: dict[_Group, dict[str, None]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _group(self, backend: str, prompt: FimPrompt) -> _Group:
        return (
            backend,
            prompt.suffix[: self.suffix_chars],
            prompt.language,
            prompt.max_tokens,
            prompt.temperature,
            prompt.stop,
            prompt.single_line,
            prompt.filename,
        )

    def get(self, backend: str, prompt: FimPrompt, *, interactive: bool = False) -> CacheHit | None:
        if prompt.sample > 0:
            return None  # another sample was asked for: the cached answer is the usual one
        group = self._group(backend, prompt)
        tail = prompt.prefix[-self.prefix_chars :]
        entry = self._entries.get((group, tail))
        if entry is not None and (entry.ahead or not interactive):
            self._entries.move_to_end((group, tail))
            if interactive:
                entry.ahead = False
            self.hits += 1
            return CacheHit(entry.text, entry.plan, 0)
        hit = self._type_through(group, prompt.prefix)
        if hit is None:
            self.misses += 1
        else:
            self.hits += 1
        return hit

    def _type_through(self, group: _Group, prefix: str) -> CacheHit | None:
        tails = self._groups.get(group)
        if not tails:
            return None
        last = prefix[-1:] if prefix else ""
        for old_tail in reversed(tails):
            entry = self._entries[(group, old_tail)]
            text = entry.text
            # The user typed text[:k] after old_tail; k < len(text) leaves something to add.
            for k in range(1, min(len(text), len(prefix) - len(old_tail) + 1)):
                if text[k - 1] != last:
                    continue
                if prefix.endswith(text[:k]) and prefix.endswith(old_tail, 0, len(prefix) - k):
                    self._entries.move_to_end((group, old_tail))
                    return CacheHit(text[k:], entry.plan, k)
        return None

    def put(
        self,
        backend: str,
        prompt: FimPrompt,
        text: str,
        plan: Plan | None,
        usage: Usage | None = None,
        *,
        ahead: bool = False,
    ) -> None:
        if self.max_entries <= 0 or not text or prompt.sample > 0:
            return  # a sample is not the usual answer a later press should get
        group = self._group(backend, prompt)
        tail = prompt.prefix[-self.prefix_chars :]
        key = (group, tail)
        self._entries[key] = _Entry(tail, text, plan, usage, ahead)
        self._entries.move_to_end(key)
        self._groups.setdefault(group, {})[tail] = None
        while len(self._entries) > self.max_entries:
            (old_group, old_tail), _ = self._entries.popitem(last=False)
            tails = self._groups.get(old_group)
            if tails is not None:
                tails.pop(old_tail, None)
                if not tails:
                    del self._groups[old_group]

    def clear(self) -> None:
        self._entries.clear()
        self._groups.clear()

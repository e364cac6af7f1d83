"""Documents and completions beyond ASCII for the AT-SPI tests in real apps (issue 23):
accents, CJK, emoji before, inside and after the caret, multi-line. Qt counts AT-SPI
offsets in UTF-16 units (an emoji is two), GTK in code points; Qt also read
EditableText's length as UTF-16 units when it was given UTF-8 bytes."""

from __future__ import annotations

from dataclasses import dataclass

from tests.e2e.conftest import FIGURES, Tally
from tests.servers.http import LoopbackServer

MARK = "‸"


@dataclass(frozen=True)
class UnicodeCase:
    document: str
    """The text with ``MARK`` where the caret is."""
    reply: str

    @property
    def text(self) -> str:
        return self.document.replace(MARK, "")

    @property
    def caret(self) -> int:
        return self.document.index(MARK)

    @property
    def line(self) -> int:
        """1-based, as ``mousepad --line`` takes it."""
        return self.document[: self.caret].count("\n") + 1

    @property
    def column(self) -> int:
        """In characters, as ``mousepad --column`` takes it."""
        return self.caret - (self.document.rfind("\n", 0, self.caret) + 1)

    @property
    def expected(self) -> str:
        return self.text[: self.caret] + self.reply + self.text[self.caret :]

    @property
    def end(self) -> int:
        """Where the caret belongs after the insertion (a Python index)."""
        return self.caret + len(self.reply)


CASES = {
    "accents": UnicodeCase("Grüße ‸aus Köln, «ça va»\n", "schöne Straße "),
    "cjk": UnicodeCase("你好‸世界\n日本語のテキスト\n", "，美丽的"),
    "emoji_before": UnicodeCase("smile 😀 and 🎉 here ‸world\n", "big "),
    "emoji_inside": UnicodeCase("party ‸time\n", "🎉 ✓ "),
    "emoji_after": UnicodeCase("hello ‸world 😀\n", "big "),
    "emoji_everywhere_multi_line": UnicodeCase(
        "def f():  # 😀\n    x = 1  # 🎉‸\n    return x  # 👍\n", "\n    y = '你好😀'\n    z = 'é'"
    ),
}


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def tally(app: str, *, exact: bool, inserted: bool) -> None:
    """Count for the closing figures: the document exact; a false "inserted"; the
    outcome ("inserted" or not) true to the document."""
    FIGURES.setdefault(f"U {app}: document exact", Tally()).check(exact)
    FIGURES.setdefault(f"U {app}: no false 'inserted'", Tally()).check(exact or not inserted)
    FIGURES.setdefault(f"U {app}: outcome true to the document", Tally()).check(exact == inserted)


def sent_since(server: LoopbackServer, before: int) -> list[tuple[str, str]]:
    """The (prefix, suffix) of each /infill request after the first ``before``."""
    requests = [r for r in server.requests if r.path == "/infill"][before:]
    return [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in requests]

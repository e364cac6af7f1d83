"""Text beyond ASCII on KDE's KWin (headless, with the real KDE portal), read and inserted
over AT-SPI in a native Wayland Qt editor (our target app): the split sent to the backend
is exact and the document is exactly prefix + completion + suffix, the caret after it (Qt
5/6 on KWin wrote NULs and stray memory after a non-ASCII completion, reported
"inserted")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Daemon, QtTarget, daemon_config
from tests.e2e.kde import UNUSABLE, KdeSession
from tests.e2e.test_kde import USER_CLIP, answer, open_target, trigger
from tests.e2e.unicode_cases import CASES, sent_since, tally, utf16
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]


@pytest.fixture(scope="module")
def kde() -> Iterator[KdeSession]:
    with KdeSession.start() as session:
        yield session


@pytest.fixture(scope="module")
def a11y_only(kde: KdeSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """Capture over AT-SPI only: a keyboard fallback would hide a wrong AT-SPI read."""
    config = daemon_config(llama[1].url, '[capture]\nstrategies = ["accessibility"]\n')
    process = Daemon(kde, config, "anyfill-kde-unicode", runtime_dir=kde.run_dir)  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture(scope="module")
def qt(kde: KdeSession) -> Iterator[QtTarget]:
    opened: list[QtTarget] = []
    target, _ = open_target(kde, opened, "anyfill-kde-unicode-qt")
    yield target
    target.close()


@pytest.mark.parametrize("name", list(CASES))
def test_qt_editor(
    name: str,
    kde: KdeSession,
    a11y_only: Daemon,
    qt: QtTarget,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    case = CASES[name]
    qt.set(case.text, utf16(case.text[: case.caret]))  # Qt's cursor counts UTF-16 units
    kde.set_clipboard(USER_CLIP)
    answer(llama, Reply(text=case.reply))
    before = sum(1 for r in llama[1].requests if r.path == "/infill")

    outcome = trigger(a11y_only)

    state = qt.state()
    tally("Qt KWin", exact=state["text"] == case.expected, inserted=outcome.status == "inserted")
    assert sent_since(llama[1], before) == [(case.text[: case.caret], case.text[case.caret :])]
    assert state["text"] == case.expected
    assert (outcome.status, outcome.method, outcome.capture) == (
        "inserted",
        "accessibility",
        "accessibility",
    ), outcome
    assert state["caret"] == utf16(case.expected[: case.end])
    assert kde.get_clipboard() == USER_CLIP

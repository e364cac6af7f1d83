"""Per-app insertion rules and clipboard races, with a second anyfill on its own hotkeys.

- ``mode = "type"``: short ASCII arrives as key events and the clipboard is never used
  for it; non-ASCII text is pasted instead.
- An app that never fetches the paste (its paste keys do nothing): the user's clipboard
  comes back after ``restore_timeout_ms``, unless the user copied something meanwhile,
  which then stays.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.harness import Daemon, QtTarget, XSession, daemon_config
from tests.e2e.test_qt_target import (
    USER_CLIP,
    answer_next,
    infill,
    press,
    press_until_requested,
    unique,
)
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

KEY = "ctrl+alt+j"
RULES = """
[hotkeys]
complete = "<ctrl>+<alt>+j"
preview = "<ctrl>+<alt>+k"
cancel = "<ctrl>+<alt>+l"

[insert]
restore_timeout_ms = 1500

[[insert.apps]]
match = "^anyfill-typist$"
mode = "type"

[[insert.apps]]
match = "^anyfill-deaf$"
paste_keys = "<f8>"

[[insert.apps]]
match = "^anyfill-insert-keys$"
copy_keys = "<ctrl>+<insert>"
paste_keys = "<shift>+<insert>"
"""


@pytest.fixture(scope="module")
def ruled(x: XSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    process = Daemon(x, daemon_config(llama[1].url, RULES), name="anyfill-rules")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def typist(x: XSession) -> Iterator[QtTarget]:
    target = QtTarget(x, "anyfill-typist")
    yield target
    target.close()


@pytest.fixture(scope="module")
def deaf(x: XSession) -> Iterator[QtTarget]:
    target = QtTarget(x, "anyfill-deaf")
    yield target
    target.close()


def start(x: XSession, target: QtTarget, text: str, reply: Reply, llama: LlamaCpp) -> None:
    target.set(text, 6)
    x.focus(target.wid)
    x.set_clipboard(USER_CLIP)
    answer_next(llama, reply)


@pytest.mark.parametrize(
    ("reply", "method"), [("x = 1; ", "type"), ("schöne ✓ ", "paste")], ids=["ascii", "unicode"]
)
def test_type_mode_types_ascii_and_pastes_the_rest(
    reply: str,
    method: str,
    x: XSession,
    typist: QtTarget,
    ruled: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    text = unique("Hello world")
    start(x, typist, text, Reply(text=reply), llama[0])

    outcome = press(x, ruled, KEY)

    assert (outcome.status, outcome.method) == ("inserted", method)
    state = typist.state()
    assert state["text"] == text[:6] + reply + text[6:]
    assert state["caret"] == 6 + len(reply)
    pasted = "ctrl+Key_V" in state["keys"]
    assert pasted == (method == "paste")
    assert x.get_clipboard() == USER_CLIP


def test_unfetched_paste_restores_the_clipboard_after_the_timeout(
    x: XSession, deaf: QtTarget, ruled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = unique("Hello world")
    start(x, deaf, text, Reply(text="never "), llama[0])

    outcome = press(x, ruled, KEY)

    assert outcome.status == "failed", outcome
    assert "did not fetch the pasted text" in outcome.reason
    assert deaf.state()["text"] == text
    assert x.get_clipboard() == USER_CLIP


def test_a_copy_made_while_pasting_is_never_overwritten(
    x: XSession, deaf: QtTarget, ruled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = unique("Hello world")
    start(x, deaf, text, Reply(text="never "), llama[0])

    count = press_until_requested(x, ruled, llama[1], KEY)
    time.sleep(0.3)  # the paste is waiting for a fetch that never comes
    x.set_clipboard("copied meanwhile")
    outcome = ruled.wait_outcome(count + 1)

    assert outcome.status == "failed", outcome
    assert "kept the new content" in ruled.log() or "keeping the new content" in ruled.log()
    assert x.get_clipboard() == "copied meanwhile"
    assert deaf.state()["text"] == text


def test_app_rule_copy_and_paste_keys_are_used(
    x: XSession, ruled: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    target = QtTarget(x, "anyfill-insert-keys")
    try:
        text = unique("Hello world")
        start(x, target, text, Reply(text="big "), llama[0])
        before = len(infill(llama[1]))

        outcome = press(x, ruled, KEY)

        assert outcome.status == "inserted", outcome
        sent = infill(llama[1])[before:]
        assert [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in sent] == [
            (text[:6], text[6:])
        ]
        state = target.state()
        assert state["text"] == text[:6] + "big " + text[6:]
        assert "ctrl+Key_Insert" in state["keys"]
        assert "shift+Key_Insert" in state["keys"]
        assert "ctrl+Key_C" not in state["keys"]
        assert "ctrl+Key_V" not in state["keys"]
        assert x.get_clipboard() == USER_CLIP
    finally:
        target.close()

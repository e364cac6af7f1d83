"""Hotkey -> capture -> loopback llama.cpp -> paste, in our PySide6 target, for real.

Each case checks what the backend received, the document, the caret, that no selection
is left, that the hotkey never reached the app, and that the user's clipboard and
PRIMARY selection are back (the R1 figures).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.conftest import FIGURES, REPEAT
from tests.e2e.harness import HOTKEY, Daemon, Outcome, QtTarget, XSession, wait_until
from tests.servers.http import LoopbackServer, RecordedRequest
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = pytest.mark.desktop

USER_CLIP = "the user's clipboard ✓ kept"
USER_PRIMARY = "the user's middle-click selection"


CARET = "‸"
MODIFIER_KEYS = ("Key_Control", "Key_Alt", "Key_Shift")
"""The user's own modifier presses reach the app before the grabbed key completes the chord."""
_tags = itertools.count(1)


@dataclass(frozen=True)
class Case:
    template: str
    """The document with ``‸`` at the caret and ``{tag}`` where a unique word goes: the
    scheduler caches answers by context, and every press here must reach the backend."""
    reply: str

    def build(self) -> tuple[str, int]:
        text = self.template.replace("{tag}", f"t{next(_tags)}")
        return text.replace(CARET, ""), text.index(CARET)


CASES = {
    "mid_line": Case("Hello ‸world {tag}", "big "),
    "line_start": Case("first {tag}\n‸second", "the "),
    "line_end": Case("first line {tag}‸\nsecond", " ends here"),
    "empty_document": Case("‸", "Dear team,"),
    "non_ascii": Case("Grüße ‸aus Köln ✓ 日本語 {tag}", "schöne ✓ "),
    # One 6000-character line, longer than the 4000-character capture cap.
    "long_line": Case("lorem ipsum " * 420 + "‸{tag} " + "lorem ipsum " * 80, "dolor "),
    "multi_line": Case("def f_{tag}(x):\n‸", "    y = x + 1\n    return y"),
}


def unique(text: str) -> str:
    return f"{text} t{next(_tags)}"


def infill(server: LoopbackServer) -> list[RecordedRequest]:
    return [request for request in server.requests if request.path == "/infill"]


def prepare(x: XSession, qt: QtTarget, text: str, caret: int) -> None:
    qt.set(text, caret)
    x.focus(qt.wid)
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")


def prepare_hello_world(x: XSession, qt: QtTarget) -> str:
    """A fresh ``Hello world`` line, the caret before ``world``; returns the text."""
    text = unique("Hello world")
    prepare(x, qt, text, 6)
    return text


def answer_next(responder: LlamaCpp, *replies: Reply) -> None:
    """The backend's next answers, with none left over from an earlier test."""
    responder.queue.clear()
    responder.push(*replies)


def press(x: XSession, daemon: Daemon, keys: str = HOTKEY) -> Outcome:
    count = len(daemon.outcomes())
    x.key(keys)
    return daemon.wait_outcome(count + 1)


def press_until_requested(
    x: XSession, daemon: Daemon, server: LoopbackServer, keys: str = HOTKEY
) -> int:
    """Press the hotkey and return once its request reached the backend; the result is
    the number of outcomes logged before the press."""
    before = len(infill(server))
    count = len(daemon.outcomes())
    x.key(keys)
    wait_until(lambda: len(infill(server)) > before, 5, "the request")
    return count


@contextlib.contextmanager
def hotkey_held(x: XSession) -> Iterator[None]:
    """The user presses the hotkey and keeps holding it until the block ends."""
    x.run("xdotool", "keydown", "--delay", "0", "ctrl+alt+space")
    try:
        yield
    finally:
        x.run("xdotool", "keyup", "--delay", "0", "space", "alt", "ctrl")


def keys_beyond_modifiers(state: dict[str, Any]) -> list[str]:
    """The keys the app received, less the user's own modifier presses."""
    return [key for key in state["keys"] if not key.endswith(MODIFIER_KEYS)]


def assert_selections_restored(x: XSession, qt: QtTarget | None = None) -> None:
    clipboard = x.get_clipboard()
    seen_by_app = qt.state()["clipboard"] if qt else clipboard
    primary = x.get_clipboard("primary")
    clip_ok = FIGURES["R1 user clipboard restored"].check(clipboard == seen_by_app == USER_CLIP)
    primary_ok = FIGURES["R1 user PRIMARY restored"].check(primary == USER_PRIMARY)
    assert clip_ok, f"clipboard now {clipboard!r} (the app sees {seen_by_app!r})"
    assert primary_ok, f"PRIMARY now {primary!r}"


@pytest.mark.parametrize("rep", range(REPEAT))
@pytest.mark.parametrize("name", list(CASES))
def test_completion_is_pasted_at_the_caret(
    name: str,
    rep: int,
    x: XSession,
    qt: QtTarget,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    case = CASES[name]
    text, caret = case.build()
    responder, server = llama
    prepare(x, qt, text, caret)
    answer_next(responder, Reply(text=case.reply))
    before = len(infill(server))

    outcome = press(x, daemon)

    # Accessibility comes first in the default chain; here no accessibility bus runs.
    assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome
    requests = infill(server)
    # An empty document is the same context every time: repeats come from the cache.
    if name != "empty_document" or rep == 0:
        assert len(requests) == before + 1
        sent = requests[-1].json()
        if name == "long_line":
            # Capture keeps the last 4000 characters before the caret (the configured cap).
            assert text[:caret].endswith(sent["input_prefix"])
            assert 3000 <= len(sent["input_prefix"]) <= 4000
        else:
            assert sent["input_prefix"] == text[:caret]
        assert sent["input_suffix"] == text[caret:]
    state = qt.state()
    assert state["text"] == text[:caret] + case.reply + text[caret:]
    assert state["caret"] == state["anchor"] == caret + len(case.reply)
    assert state["selected"] == ""
    assert "ctrl+alt+Key_Space" not in state["keys"], "the hotkey reached the application"
    assert_selections_restored(x, qt)


@pytest.mark.parametrize("rep", range(REPEAT))
def test_all_clipboard_formats_survive(
    rep: int, x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = unique("Hello world")
    qt.set(text, 6)
    x.focus(qt.wid)
    qt.call(cmd="copy_rich", text="rich text", html="<b>rich</b> text")
    x.set_clipboard(USER_PRIMARY, "primary")
    answer_next(llama[0], Reply(text="big "))

    outcome = press(x, daemon)

    assert outcome.status == "inserted", outcome
    assert qt.state()["text"] == "Hello big " + text[6:]
    html = x.get_clipboard(target="text/html")
    custom = x.get_clipboard(target="application/x-anyfill-test")
    text = x.get_clipboard()
    ok = FIGURES["R1 user clipboard restored"].check(
        text == "rich text" and custom == "txet hcir" and html is not None and "<b>rich</b>" in html
    )
    assert ok, (text, html, custom)


@pytest.mark.parametrize("rep", range(REPEAT))
def test_backend_error_inserts_nothing(
    rep: int, x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare_hello_world(x, qt)
    # A 400: a 5xx would (rightly) cool the only backend down for the following tests.
    answer_next(llama[0], Reply(error="bad_request"))

    outcome = press(x, daemon)

    assert outcome.status == "failed", outcome
    assert "rejected the request" in outcome.reason
    state = qt.state()
    assert (state["text"], state["caret"], state["selected"]) == (text, 6, "")
    assert_selections_restored(x, qt)


@pytest.mark.parametrize("rep", range(REPEAT))
def test_cancel_hotkey_stops_the_request(
    rep: int, x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    text = prepare_hello_world(x, qt)
    answer_next(responder, Reply(text="too late ", delay_s=3))
    dropped = len(server.disconnects)

    count = press_until_requested(x, daemon, server)
    x.key("ctrl+alt+BackSpace")
    outcome = daemon.wait_outcome(count + 1)

    assert outcome.status == "cancelled", outcome
    server.wait_disconnect_sync(dropped + 1, within=5)  # the HTTP stream was closed
    state = qt.state()
    assert (state["text"], state["caret"], state["selected"]) == (text, 6, "")
    assert_selections_restored(x, qt)


def test_newer_press_supersedes_the_running_one(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    text = prepare_hello_world(x, qt)
    answer_next(responder, Reply(text="first ", delay_s=3), Reply(text="second "))

    count = press_until_requested(x, daemon, server)
    x.key(HOTKEY)
    first, second = daemon.wait_outcome(count + 1), daemon.wait_outcome(count + 2)

    assert (first.status, second.status) == ("cancelled", "inserted")
    assert qt.state()["text"] == "Hello second " + text[6:]
    assert_selections_restored(x, qt)


@pytest.fixture(scope="module")
def other(x: XSession) -> object:
    target = QtTarget(x, "anyfill-other")
    yield target
    target.close()


@pytest.mark.parametrize("rep", range(REPEAT))
def test_focus_moved_before_the_answer_inserts_nothing(
    rep: int,
    x: XSession,
    qt: QtTarget,
    other: QtTarget,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    responder, server = llama
    other.set("other window", 5)
    text = prepare_hello_world(x, qt)
    answer_next(responder, Reply(text="never ", delay_s=0.5))

    count = press_until_requested(x, daemon, server)
    x.focus(other.wid)
    outcome = daemon.wait_outcome(count + 1)

    texts = (qt.state()["text"], other.state()["text"])
    ok = FIGURES["R2 nothing inserted after a focus change"].check(
        outcome.status == "kept" and texts == (text, "other window")
    )
    assert ok, (outcome, texts)
    assert "focus moved" in outcome.reason
    assert outcome.chars == len("never ")  # the completion is kept, not lost
    assert_selections_restored(x, other)


def test_password_manager_is_skipped_by_default(
    x: XSession, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    vault = QtTarget(x, "keepassxc")  # the default rules disable password managers
    try:
        prepare(x, vault, "secret", 3)
        before = len(infill(llama[1]))

        outcome = press(x, daemon)

        assert outcome.status == "skipped", outcome
        assert len(infill(llama[1])) == before  # nothing was read or sent
        state = vault.state()
        sent = keys_beyond_modifiers(state)
        assert (state["text"], state["caret"], sent) == ("secret", 3, [])
        assert_selections_restored(x, vault)
    finally:
        vault.close()


def test_selection_made_while_waiting_is_not_pasted_over(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    responder, server = llama
    text = prepare_hello_world(x, qt)
    answer_next(responder, Reply(text="never ", delay_s=0.5))

    count = press_until_requested(x, daemon, server)
    x.key("shift+Right")  # the user selects the "w" while the backend thinks
    outcome = daemon.wait_outcome(count + 1)

    assert outcome.status == "failed", outcome
    assert "selected" in outcome.reason
    state = qt.state()
    assert (state["text"], state["selected"]) == (text, "w")
    assert x.get_clipboard() == USER_CLIP


def test_large_clipboard_survives_byte_for_byte(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    # Larger than one X request: both the save and the restore go incrementally (INCR).
    big = "".join(f"line {n} ✓ of a large clipboard\n" for n in range(30000))
    text = unique("Hello world")
    qt.set(text, 6)
    x.focus(qt.wid)
    x.set_clipboard(big)
    answer_next(llama[0], Reply(text="big "))

    outcome = press(x, daemon)

    assert outcome.status == "inserted", outcome
    assert qt.state()["text"] == "Hello big " + text[6:]
    restored = x.get_clipboard()
    ok = FIGURES["R1 user clipboard restored"].check(restored == big)
    assert ok, f"{len(big)} characters copied, {len(restored or '')} restored"


def test_preview_hotkey_without_a_window_pastes(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare_hello_world(x, qt)
    answer_next(llama[0], Reply(text="big "))

    outcome = press(x, daemon, "ctrl+alt+Return")

    assert outcome.status == "inserted", outcome
    assert "no preview window in headless mode" in daemon.log()
    assert qt.state()["text"] == "Hello big " + text[6:]
    assert_selections_restored(x, qt)


@pytest.mark.parametrize("lock", ["Caps_Lock", "Num_Lock"])
def test_hotkey_works_with_a_lock_key_on(
    lock: str, x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare_hello_world(x, qt)
    answer_next(llama[0], Reply(text="big "))
    x.key(lock, clear=False)  # the grab must match with Lock / Mod2 in the state too
    try:
        count = len(daemon.outcomes())
        x.key(HOTKEY, clear=False)
        outcome = daemon.wait_outcome(count + 1)
    finally:
        x.key(lock, clear=False)
    assert outcome.status == "inserted", outcome
    assert qt.state()["text"] == "Hello big " + text[6:]
    assert_selections_restored(x, qt)


def test_nothing_is_sent_while_the_user_still_holds_the_hotkey(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare_hello_world(x, qt)
    answer_next(llama[0], Reply(text="big "))
    count = len(daemon.outcomes())

    with hotkey_held(x):
        time.sleep(0.4)
        state = qt.state()
        sent = keys_beyond_modifiers(state)
        assert (state["text"], sent) == (text, [])  # anyfill waits for the release
        assert len(daemon.outcomes()) == count
    outcome = daemon.wait_outcome(count + 1)

    assert outcome.status == "inserted", outcome
    assert qt.state()["text"] == "Hello big " + text[6:]
    assert_selections_restored(x, qt)


def test_keys_held_too_long_send_nothing(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    text = prepare_hello_world(x, qt)
    before = len(infill(llama[1]))
    count = len(daemon.outcomes())

    with hotkey_held(x):
        outcome = daemon.wait_outcome(count + 1)  # after modifier_release_timeout_ms

    assert outcome.status == "failed", outcome
    assert "still held" in outcome.reason
    state = qt.state()
    sent = keys_beyond_modifiers(state)
    assert (state["text"], sent) == (text, [])
    assert len(infill(llama[1])) == before


def test_an_app_that_selects_late_never_loses_text(
    x: XSession, qt: QtTarget, daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """The app freezes on the suffix selection key far longer than it ever took before
    (anyfill's wait follows what it took), then selects the suffix late. The press fails
    cleanly: nothing pasted over that selection, the selection collapsed back to the
    caret, the user's CLIPBOARD and PRIMARY back. (Should the wait ever cover the freeze,
    the completion lands whole instead; either way no text is lost.)"""
    text = prepare_hello_world(x, qt)
    answer_next(llama[0], Reply(text="big ", delay_s=0.6))
    qt.call(cmd="stall", key="Key_End", ms=450)

    outcome = press(x, daemon)

    state = qt.state()
    if outcome.status == "inserted":
        assert state["text"] == text[:6] + "big " + text[6:]
    else:
        assert outcome.status == "failed", outcome
        assert "stopped waiting" in outcome.reason or "selected" in outcome.reason, outcome
        assert (state["text"], state["caret"]) == (text, 6)  # the suffix is still there
    assert state["selected"] == ""
    assert_selections_restored(x, qt)

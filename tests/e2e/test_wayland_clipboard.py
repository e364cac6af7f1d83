"""The user's clipboard across a paste on Wayland, through the native data-control route.

A real client (``tests/e2e/wl_offer.py``) owns CLIPBOARD and PRIMARY with several formats
at once, as a browser does after a copy. The daemon reads the target by keyboard selection
and pastes into our Qt editor on Qt's Wayland plugin; afterwards wl-paste must list every
original type and give each one byte for byte. Mousepad, told to paste with Shift+F12 (a key
it has no binding for), is the application that never reads a paste.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack

import pytest

from anyfill.daemon.desktop.ports import ClipSnapshot
from anyfill.daemon.wayland.connection import WaylandConnection
from anyfill.daemon.wayland.datacontrol import (
    TYPE_MAX_BYTES,
    DataControlClipboard,
    open_native_clipboard,
)
from tests.e2e.chromium import CHROMIUM, SKIP_REASON, app_command
from tests.e2e.conftest import FIGURES, REPEAT, Tally
from tests.e2e.harness import Daemon, Outcome, QtTarget, daemon_config, wait_until
from tests.e2e.wayland import UNUSABLE, Editor, WaylandSession, open_mousepad
from tests.e2e.wl_offer import start_owner
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]

ALL_FORMATS = FIGURES.setdefault("R3 user clipboard restored with every format", Tally())
ALL_PRIMARY = FIGURES.setdefault("R3 user PRIMARY restored with every format", Tally())

CLIPBOARD = {
    "text/plain;charset=utf-8": "the user's copy ✓".encode(),
    "text/plain": "the user's copy ✓".encode(),
    "text/html": '<meta charset="utf-8"><b>the user\'s</b> copy ✓'.encode(),
    # Every byte value, 0x00 and 0xff included, and not valid UTF-8.
    "image/png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 300,
}
PRIMARY = {
    "text/plain;charset=utf-8": "selected ✓".encode(),
    "text/html": "<i>selected</i> ✓".encode(),
}


@pytest.fixture(scope="module")
def wl() -> Iterator[WaylandSession]:
    with WaylandSession.start() as session:
        yield session


@pytest.fixture(scope="module", autouse=True)
def browser(wl: WaylandSession) -> Iterator[int]:
    """Chromium on Ozone's Wayland backend with text selected in a page; its window (sway
    con id). Started before anything in the module sends keys: on this sway 1.7 Chromium
    crashes at start (SIGSEGV) once a wtype virtual keyboard's keymap was the seat's;
    started first, it takes later ones."""
    if CHROMIUM is None:
        yield 0
        return
    page = wl.workdir / "copy.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><p id=t>Grüße <b>bold</b> <a href=#x>link</a> ✓</p>"
        "<script>const r = document.createRange();"
        "r.selectNodeContents(document.getElementById('t'));"
        "getSelection().addRange(r);</script>",
        encoding="utf-8",
    )
    known = {n.get("id") for n in wl.windows()}
    process = wl.spawn(
        app_command(wl.workdir / "chromium", page.as_uri(), "--ozone-platform=wayland"),
        "chromium.log",
    )

    def new_window() -> int:
        node = wl.focused_window()
        return int(node["id"]) if node.get("id") not in known | {None} else 0

    con_id = wait_until(new_window, 60, "the Chromium window")
    yield con_id
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(20)


@pytest.fixture(scope="module")
def daemon(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """Typing asked for everywhere (so AT-SPI insertion is skipped) and non-ASCII answers,
    which are pasted: the paste route in any window. Our Qt editor is read by keyboard
    selection, the rest by AT-SPI."""
    rules = (
        '[[insert.apps]]\nmatch = "^python"\nmode = "type"\ncapture = ["keyboard"]\n'
        '[[insert.apps]]\nmatch = "^mousepad$"\nmode = "type"\npaste_keys = "<shift>+<f12>"\n'
    )
    process = Daemon(wl, daemon_config(llama[1].url, rules), "anyfill-wlclip")  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture
def owner(wl: WaylandSession) -> Iterator[None]:
    """The user's multi-format clipboard and selection, owned by a real client."""
    process = start_owner(wl, CLIPBOARD, PRIMARY)
    assert types(wl) == set(CLIPBOARD)
    yield
    if process.poll() is None:
        process.kill()
    process.wait(5)


@pytest.fixture
def editors(wl: WaylandSession) -> Iterator[list[Editor]]:
    opened: list[Editor] = []
    yield opened
    for editor in opened:
        editor.close()


def types(wl: WaylandSession, *, primary: bool = False) -> set[str]:
    """The offered types; none when nobody owns the selection."""
    flag = ["--primary"] if primary else []
    out = wl.run("wl-paste", *flag, "--list-types", check=False)
    return set() if out.strip() == "No selection" else set(out.split())


def paste(wl: WaylandSession, mime: str, *, primary: bool = False) -> bytes:
    flag = ["--primary"] if primary else []
    result = subprocess.run(
        ["wl-paste", *flag, "--no-newline", "--type", mime],
        env=wl.env,
        capture_output=True,
        timeout=5,
        check=False,
    )
    return result.stdout if result.returncode == 0 else b"<wl-paste failed>"


def intact(wl: WaylandSession, formats: dict[str, bytes], *, primary: bool = False) -> bool:
    return types(wl, primary=primary) == set(formats) and all(
        paste(wl, mime, primary=primary) == data for mime, data in formats.items()
    )


def trigger(daemon: Daemon) -> Outcome:
    count = len(daemon.outcomes())
    code, out = daemon.cli("trigger", "complete")
    assert code == 0, out
    try:
        return daemon.wait_outcome(count + 1)
    except TimeoutError as exc:
        raise AssertionError(daemon.log()[-3000:]) from exc


def answer(llama: tuple[LlamaCpp, LoopbackServer], reply: Reply) -> None:
    llama[0].queue.clear()
    llama[0].push(reply)


def test_the_native_route_is_used(daemon: Daemon) -> None:
    assert "wayland clipboard: data-control (wlr-data-control-unstable-v1 v2, native" in (
        daemon.log()
    )


@pytest.mark.parametrize("rep", range(REPEAT))
def test_paste_restores_every_format_of_clipboard_and_primary(
    rep: int,
    wl: WaylandSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    owner: None,
) -> None:
    """Keyboard capture (our sentinels, the app's copies) and the paste both take the
    selections over; afterwards both are the user's again, every type, every byte."""
    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, f"anyfill-wlclip-qt-{rep}")  # type: ignore[arg-type]
    try:
        wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")
        target.set("Grüße aus Köln", 6)
        answer(llama, Reply(text="schöne ✓ "))

        outcome = trigger(daemon)

        assert (outcome.status, outcome.method, outcome.capture) == (
            "inserted",
            "paste",
            "keyboard",
        ), outcome
        state = target.state()
        assert (state["text"], state["caret"]) == ("Grüße schöne ✓ aus Köln", 15)
        got = {mime: paste(wl, mime) for mime in CLIPBOARD}
        assert ALL_FORMATS.check(intact(wl, CLIPBOARD)), (
            types(wl),
            {mime: (len(data), data[:40]) for mime, data in got.items() if data != CLIPBOARD[mime]},
        )
        assert ALL_PRIMARY.check(intact(wl, PRIMARY, primary=True)), types(wl, primary=True)
    finally:
        target.close()


def test_an_app_that_never_reads_the_paste_is_not_inserted_and_keeps_the_clipboard(
    wl: WaylandSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    owner: None,
    editors: list[Editor],
) -> None:
    """Mousepad, told to paste with a key it has no binding for, never reads our offer: the
    outcome says so (not inserted, not sent) and the user's clipboard is back whole."""
    editor = open_mousepad(wl, "alpha beta\n", 1, 6)
    editors.append(editor)
    answer(llama, Reply(text="schöne ✓ "))

    outcome = trigger(daemon)

    assert outcome.status == "failed", outcome
    assert "did not fetch the pasted text" in outcome.reason, outcome
    assert not editor.modified()
    assert ALL_FORMATS.check(intact(wl, CLIPBOARD)), types(wl)
    assert ALL_PRIMARY.check(intact(wl, PRIMARY, primary=True))


def test_a_copy_by_another_client_while_pasting_is_never_restored_over(
    wl: WaylandSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    owner: None,
    editors: list[Editor],
) -> None:
    """While our completion waits on the clipboard for a read that never comes, another
    client copies: our source is cancelled, and the user's old clipboard is not put back
    over the new one. Our offer is seen by its types (reading it would count as a paste)."""
    editor = open_mousepad(wl, "alpha beta\n", 1, 6)
    editors.append(editor)
    answer(llama, Reply(text="schöne ✓ "))
    count = len(daemon.outcomes())
    completion_types = {"text/plain;charset=utf-8", "text/plain", "UTF8_STRING", "TEXT"}

    code, out = daemon.cli("trigger", "complete")
    assert code == 0, out
    wait_until(lambda: types(wl) == completion_types, 5, "the completion on the clipboard")
    wl.set_clipboard("copied meanwhile ✓")
    outcome = daemon.wait_outcome(count + 1)

    assert outcome.status == "failed", outcome
    assert "clipboard was taken while pasting" in outcome.reason, outcome
    time.sleep(0.3)  # a restore would have come by now
    assert wl.get_clipboard() == "copied meanwhile ✓"
    assert not editor.modified()


async def test_the_port_tells_who_holds_each_selection_from_the_compositor(
    wl: WaylandSession, owner: None
) -> None:
    """The Clipboard port on its own connection: another client's formats read whole, our
    offer served and its reads counted, a copy elsewhere seen as a loss, and ``holder``
    following the compositor's selection events."""
    async with AsyncExitStack() as stack:
        conn = await stack.enter_async_context(WaylandConnection(wl.env))
        clipboard = await stack.enter_async_context(DataControlClipboard(conn))
        assert (clipboard.holder("clipboard"), clipboard.holder("primary")) == ("other", "other")
        saved = await clipboard.snapshot("clipboard")
        assert {mime: item[2] for mime, item in saved.items.items()} == CLIPBOARD
        assert await clipboard.read_text("primary", 2.0) == "selected ✓"

        offer = await clipboard.offer("clipboard", ClipSnapshot.from_text("middle ✓"))
        assert clipboard.holder("clipboard") == "us"
        assert offer.fetches == 0
        assert await asyncio.to_thread(paste, wl, "text/plain") == "middle ✓".encode()
        assert offer.fetches == 1
        assert offer.fetched.is_set()

        await asyncio.to_thread(wl.set_clipboard, "the user copied this")
        await asyncio.wait_for(offer.lost.wait(), 5)
        assert clipboard.holder("clipboard") == "other"
        assert await clipboard.read_text("clipboard", 2.0) == "the user copied this"

        restored = await clipboard.restore("clipboard", saved)
        assert restored is not None
        assert clipboard.holder("clipboard") == "us"
        assert await asyncio.to_thread(intact, wl, CLIPBOARD)
        assert restored.fetches == len(CLIPBOARD)  # each of wl-paste's reads was seen
        assert not restored.lost.is_set()

        assert await clipboard.restore("clipboard", ClipSnapshot()) is None
        assert clipboard.holder("clipboard") == "nobody"
        assert not restored.lost.is_set()  # replaced by ourselves: no loss
        assert await asyncio.to_thread(types, wl) == set()


def _read_all(wl: WaylandSession, *, primary: bool = False) -> dict[str, bytes]:
    return {mime: paste(wl, mime, primary=primary) for mime in types(wl, primary=primary)}


@pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)
def test_a_chromium_copy_comes_back_whole_after_a_paste(
    wl: WaylandSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    browser: int,
) -> None:
    """A real browser's copy: Chromium on Ozone's Wayland backend, text selected in a page
    and copied with Ctrl+C (wtype), offers plain text, HTML and its own types; after a paste
    elsewhere every one of them reads the same, and so does its PRIMARY."""
    wl.focus(browser)
    wl.set_clipboard("before the copy")  # plain text: HTML then comes from Chromium

    def copied() -> bool:
        wl.run("wtype", "-M", "ctrl", "-k", "c", "-m", "ctrl")
        return "text/html" in types(wl)

    wait_until(copied, 20, "Chromium's copy")
    before, primary_before = _read_all(wl), _read_all(wl, primary=True)
    assert b">bold</b>" in before["text/html"]
    assert before["text/plain;charset=utf-8"] == "Grüße bold link ✓".encode()

    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, "anyfill-wlclip-qt-chromium")  # type: ignore[arg-type]
    try:
        wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")
        target.set("Grüße aus Köln", 6)
        answer(llama, Reply(text="schöne ✓ "))

        outcome = trigger(daemon)

        assert (outcome.status, outcome.method) == ("inserted", "paste"), outcome
        assert target.state()["text"] == "Grüße schöne ✓ aus Köln"
        after = _read_all(wl)
        assert ALL_FORMATS.check(after == before), (sorted(before), sorted(after))
        assert ALL_PRIMARY.check(_read_all(wl, primary=True) == primary_before)
    finally:
        target.close()


async def test_a_clipboard_we_serve_outlives_the_daemon(
    wl: WaylandSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At exit the restored clipboard we serve is handed to a wl-copy server (its text:
    wl-copy serves one format), not lost with our connection."""
    for key in ("WAYLAND_DISPLAY", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(key, wl.env[key])  # wl-copy runs in the daemon's environment
    async with AsyncExitStack() as stack:
        conn = await stack.enter_async_context(WaylandConnection(wl.env))
        clipboard, why_not = await open_native_clipboard(stack, conn)
        assert clipboard is not None, why_not
        snapshot = ClipSnapshot(
            {
                "text/plain;charset=utf-8": ("text/plain;charset=utf-8", 8, "kept ✓".encode()),
                "text/html": ("text/html", 8, b"<b>kept</b>"),
            }
        )
        await clipboard.restore("clipboard", snapshot)
        assert clipboard.holder("clipboard") == "us"
    assert await asyncio.to_thread(wl.get_clipboard) == "kept ✓"


async def test_a_huge_or_stalled_format_is_left_out_without_blocking_the_loop(
    wl: WaylandSession,
) -> None:
    """An owner offering a format over the size limit and one it never writes: the snapshot
    keeps the others, within the read budget, while the loop goes on running."""
    huge = TYPE_MAX_BYTES + 1
    owner = await asyncio.to_thread(
        start_owner,
        wl,
        {"text/plain": b"kept", "text/html": b"<b>kept</b>"},
        {},
        huge={"image/bmp": huge},
        stalled=("image/png",),
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    try:
        async with AsyncExitStack() as stack:
            conn = await stack.enter_async_context(WaylandConnection(wl.env))
            clipboard = await stack.enter_async_context(DataControlClipboard(conn))
            ticker = asyncio.create_task(tick())
            saved = await clipboard.snapshot("clipboard")
            ticker.cancel()
        assert {mime: item[2] for mime, item in saved.items.items()} == {
            "text/plain": b"kept",
            "text/html": b"<b>kept</b>",
        }
        # The stalled format held the snapshot for its whole budget; the loop ran all along
        # (ticks of 10 ms; a blocked loop would have made none).
        assert ticks >= 10, ticks
    finally:
        owner.kill()
        owner.wait(5)


def test_a_clipboard_that_cannot_be_saved_is_never_taken(
    wl: WaylandSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    """An owner that offers formats and answers none of them in time (a hung or very slow
    app): saving the user's clipboard fails, so the press stops before taking it (nothing
    is copied, nothing typed) and the owner still holds the clipboard afterwards. Before
    this rule the snapshot came back empty and the restore cleared the user's clipboard."""
    stalled = ("text/plain", "text/html")
    process = start_owner(wl, {}, {"text/plain": b"p"}, stalled=stalled)
    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, "anyfill-wlclip-qt-unsaved")  # type: ignore[arg-type]
    try:
        wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")
        target.set("alpha beta", 6)
        answer(llama, Reply(text="gamma "))

        outcome = trigger(daemon)

        assert outcome.status == "failed", outcome
        assert "could not save the clipboard selection" in outcome.reason, outcome
        state = target.state()
        assert (state["text"], state["caret"]) == ("alpha beta", 6)
        assert types(wl) == set(stalled)  # still the hung owner's: never taken over
        assert process.poll() is None
    finally:
        target.close()
        if process.poll() is None:
            process.kill()
        process.wait(5)

"""The desktop path in a native Wayland session: sway headless, native Wayland mousepad.

The daemon runs with the session's environment and picks the Wayland desktop on its own
(XDG_SESSION_TYPE=wayland). Presses arrive as ``anyfill trigger complete`` (the command a
user binds in the desktop's keyboard settings) and through a real sway key binding pressed
on sway's virtual keyboard. The document is read back from disk after mousepad saves it
(its exported ``file.save`` action); a '|' typed first marks where the caret was. The
user's clipboard is read back with wl-paste.

One sway, one bus, one daemon per module: start-up is paid once.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from anyfill.daemon.desktop.ports import ClipSnapshot, Keys
from anyfill.daemon.wayland.clipboard import WlClipboard
from anyfill.daemon.wayland.keys import WtypeKeys
from anyfill.daemon.wayland.virtual_keyboard import VirtualKeyboard
from tests.e2e.conftest import FIGURES, REPEAT
from tests.e2e.harness import Daemon, Outcome, QtTarget, daemon_config, wait_until
from tests.e2e.wayland import UNUSABLE, Editor, WaylandSession, open_mousepad
from tests.servers.http import LoopbackServer, RecordedRequest
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]

USER_CLIP = "the user's clipboard ✓ (wayland)"
BINDING = "Ctrl+Alt+space"
_tags = itertools.count(1)


@dataclass(frozen=True)
class Case:
    lines: tuple[str, ...]
    line: int
    """1-based, as ``mousepad --line`` takes it."""
    column: int
    reply: str


CASES = {
    "mid_line": Case(("alpha beta {tag}", "gamma"), 1, 6, "big "),
    "line_start": Case(("alpha {tag}", "gamma delta"), 2, 0, "new "),
    "line_end": Case(("alpha {tag}", "gamma"), 1, 100, " omega"),
    "non_ascii": Case(("Grüße aus Köln ✓ {tag}", "日本語"), 1, 6, "schöne ✓ "),
    "multi_line": Case(("def g_{tag}(x):", "", "tail"), 1, 100, "\n    y = x * 2\n    return y"),
}


@pytest.fixture(scope="module")
def wl() -> Iterator[WaylandSession]:
    trigger = f"{sys.executable} -m anyfill.daemon.launcher trigger complete"
    with WaylandSession.start(f"bindsym --release {BINDING} exec {trigger}\n") as session:
        yield session


@pytest.fixture(scope="module")
def wl_daemon(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    process = Daemon(wl, daemon_config(llama[1].url), "anyfill-wl", runtime_dir=wl.run_dir)  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture(scope="module")
def typing_daemon(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """A daemon told to type into mousepad, in a session without compositor IPC (the
    focus guard then asks AT-SPI, as on GNOME and KDE)."""
    env = {k: v for k, v in wl.env.items() if k != "SWAYSOCK"}
    rule = '[[insert.apps]]\nmatch = "^mousepad$"\nmode = "type"\n'
    process = Daemon(replace(wl, env=env), daemon_config(llama[1].url, rule), "anyfill-typing")  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture(scope="module")
def paste_daemon(wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    """A daemon told to type into our Qt editor and to read it by keyboard selection: the
    routes where AT-SPI is not used."""
    rule = '[[insert.apps]]\nmatch = "^python"\nmode = "type"\ncapture = ["keyboard"]\n'
    process = Daemon(wl, daemon_config(llama[1].url, rule), "anyfill-paste")  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture(scope="module")
def gtk_paste_daemon(
    wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]
) -> Iterator[Daemon]:
    """A daemon that reads mousepad by keyboard selection; with mousepad out of AT-SPI's
    reach, it pastes too: a GTK app that gives AT-SPI nothing."""
    rule = '[[insert.apps]]\nmatch = "^mousepad$"\ncapture = ["keyboard"]\n'
    process = Daemon(wl, daemon_config(llama[1].url, rule), "anyfill-gtk-paste")  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture(scope="module")
def clipboard_daemon(
    wl: WaylandSession, llama: tuple[LlamaCpp, LoopbackServer]
) -> Iterator[Daemon]:
    rule = '[[insert.apps]]\nmatch = "^mousepad$"\ncapture = ["clipboard"]\n'
    process = Daemon(wl, daemon_config(llama[1].url, rule), "anyfill-clip")  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture
def editors(wl: WaylandSession) -> Iterator[list[Editor]]:
    opened: list[Editor] = []
    yield opened
    for editor in opened:
        editor.close()


def infill(server: LoopbackServer) -> list[RecordedRequest]:
    return [request for request in server.requests if request.path == "/infill"]


def answer(llama: tuple[LlamaCpp, LoopbackServer], reply: Reply) -> None:
    llama[0].queue.clear()
    llama[0].push(reply)


def trigger(daemon: Daemon) -> Outcome:
    count = len(daemon.outcomes())
    code, out = daemon.cli("trigger", "complete")
    assert code == 0, out
    try:
        return daemon.wait_outcome(count + 1)
    except TimeoutError as exc:
        raise AssertionError(daemon.log()[-3000:]) from exc


def prepare(wl: WaylandSession, editors: list[Editor], case: Case) -> tuple[Editor, str, int]:
    tag = f"w{next(_tags)}"
    lines = [line.replace("{tag}", tag) for line in case.lines]
    text = "\n".join(lines) + "\n"
    column = min(case.column, len(lines[case.line - 1]))
    caret = sum(len(line) + 1 for line in lines[: case.line - 1]) + column
    editor = open_mousepad(wl, text, case.line, column)
    editors.append(editor)
    wl.set_clipboard(USER_CLIP)
    return editor, text, caret


def open_unreachable_mousepad(
    wl: WaylandSession, editors: list[Editor], case: Case
) -> tuple[Editor, str, int]:
    """Like :func:`prepare`, but mousepad runs without its accessibility bridge (a fresh
    instance: every earlier test closed its editors), so AT-SPI can neither read nor write
    it; the user's primary selection is set too."""
    assert not any(n.get("app_id") == "mousepad" for n in wl.windows()), "mousepad still runs"
    editor, text, caret = prepare(replace(wl, env={**wl.env, "NO_AT_BRIDGE": "1"}), editors, case)
    wl.set_clipboard("the user's primary selection", primary=True)
    return editor, text, caret


def test_the_daemon_chose_the_wayland_routes(wl_daemon: Daemon) -> None:
    log = wl_daemon.log()
    assert "wayland insertion: AT-SPI EditableText, else paste" in log
    assert "wayland clipboard: data-control (wlr-data-control-unstable-v1 v2, native" in log
    assert "wayland keys: virtual keyboard (anyfill's own, zwp_virtual_keyboard_v1)" in log
    assert "wayland focus guard: sway IPC" in log
    code, out = wl_daemon.cli("status")
    assert code == 0, out
    assert ", wayland" in out


@pytest.mark.parametrize("rep", range(REPEAT))
@pytest.mark.parametrize("name", list(CASES))
def test_trigger_completes_in_native_wayland_mousepad(
    name: str,
    rep: int,
    wl: WaylandSession,
    wl_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    case = CASES[name]
    editor, text, caret = prepare(wl, editors, case)
    responder, server = llama
    responder.queue.clear()
    responder.push(Reply(text=case.reply))
    before = len(infill(server))

    outcome = trigger(wl_daemon)

    assert (outcome.status, outcome.method, outcome.capture) == (
        "inserted",
        "accessibility",
        "accessibility",
    ), outcome
    assert outcome.app == "mousepad"
    requests = infill(server)
    assert len(requests) == before + 1
    sent = requests[-1].json()
    assert (sent["input_prefix"], sent["input_suffix"]) == (text[:caret], text[caret:])
    restored = FIGURES["R1 user clipboard restored"].check(wl.get_clipboard() == USER_CLIP)
    assert restored, wl.get_clipboard()
    assert editor.modified()
    wl.type_text("|")  # lands at the caret: the caret is after the inserted text
    saved = wait_until(lambda: _with_mark(editor.save()), 5, "the typed mark in the document")
    assert saved == text[:caret] + case.reply + "|" + text[caret:]


def test_sway_key_binding_runs_the_trigger(
    wl: WaylandSession,
    wl_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    """sway runs ``anyfill trigger complete`` from its binding (on release, as the docs
    advise); the chord is pressed on
    sway's virtual keyboard (wtype), which sway's binding code sees like a real one."""
    editor, text, caret = prepare(wl, editors, CASES["mid_line"])
    responder, _ = llama
    responder.queue.clear()
    responder.push(Reply(text="bound "))
    count = len(wl_daemon.outcomes())

    wl.run("wtype", "-M", "ctrl", "-M", "alt", "-k", "space", "-m", "alt", "-m", "ctrl")

    outcome = wl_daemon.wait_outcome(count + 1)
    assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
    saved = editor.save()
    assert saved == text[:caret] + "bound " + text[caret:]
    assert wl.get_clipboard() == USER_CLIP


@pytest.mark.parametrize("rep", range(REPEAT))
def test_focus_moved_before_the_answer_inserts_nothing(
    rep: int,
    wl: WaylandSession,
    wl_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    first, text, _ = prepare(wl, editors, CASES["mid_line"])
    second = open_mousepad(wl, "other window\n", 1, 5, window=2)
    editors.append(second)
    wl.focus(first.con_id)
    responder, server = llama
    responder.queue.clear()
    responder.push(Reply(text="never ", delay_s=0.6))
    before = len(infill(server))
    count = len(wl_daemon.outcomes())

    code, out = wl_daemon.cli("trigger", "complete")
    assert code == 0, out
    wait_until(lambda: len(infill(server)) > before, 5, "the request to reach the backend")
    wl.focus(second.con_id)
    outcome = wl_daemon.wait_outcome(count + 1)

    # Neither document changed: mousepad marks a changed one in its title.
    changed = (first.modified(), second.modified())
    ok = FIGURES["R2 nothing inserted after a focus change"].check(
        outcome.status == "kept" and changed == (False, False)
    )
    assert ok, (outcome, changed)
    assert first.path.read_text(encoding="utf-8") == text
    assert "focus moved" in outcome.reason
    assert FIGURES["R1 user clipboard restored"].check(wl.get_clipboard() == USER_CLIP)


def _with_mark(saved: str) -> str:
    return saved if "|" in saved else ""


def test_doctor_names_the_route_of_each_step(wl: WaylandSession, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[backends]]\nname = "x"\ntype = "llamacpp"\nurl = "http://127.0.0.1:9"\n'
        '[routing]\ndefault = ["x"]\n'
    )
    out = wl.run(
        sys.executable, "-m", "anyfill.daemon.cli", "--config", str(config), "doctor", check=False
    )
    lines = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 1}
    assert "desktop" in lines, out
    assert lines["desktop"].startswith("ok")
    assert "Wayland session (sway)" in lines["desktop"]
    assert lines["hotkeys"].startswith("warn")
    assert "anyfill trigger complete" in lines["hotkeys"]
    assert "AT-SPI EditableText" in lines["insertion"]
    assert "data-control (wlr-data-control-unstable-v1 v2, native)" in lines["clipboard"]
    assert "virtual keyboard (anyfill's own" in lines["keys"]
    assert "sway IPC" in lines["focus"]


def test_type_mode_types_on_the_virtual_keyboard_guarded_by_atspi_focus(
    wl: WaylandSession,
    typing_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    log = typing_daemon.log()
    assert "wayland focus guard: AT-SPI" in log
    editor, text, caret = prepare(wl, editors, CASES["mid_line"])
    answer(llama, Reply(text="typed "))

    outcome = trigger(typing_daemon)

    assert (outcome.status, outcome.method, outcome.capture) == (
        "inserted",
        "type",
        "accessibility",
    ), outcome
    assert editor.save() == text[:caret] + "typed " + text[caret:]
    assert wl.get_clipboard() == USER_CLIP


def test_atspi_focus_guard_keeps_the_completion_when_the_window_changes(
    wl: WaylandSession,
    typing_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    first, _, _ = prepare(wl, editors, CASES["mid_line"])
    second = open_mousepad(wl, "other window\n", 1, 5, window=2)
    editors.append(second)
    wl.focus(first.con_id)
    answer(llama, Reply(text="never ", delay_s=0.6))
    count = len(typing_daemon.outcomes())
    before = len(infill(llama[1]))

    code, out = typing_daemon.cli("trigger", "complete")
    assert code == 0, out
    wait_until(lambda: len(infill(llama[1])) > before, 5, "the request to reach the backend")
    wl.focus(second.con_id)
    outcome = typing_daemon.wait_outcome(count + 1)

    changed = (first.modified(), second.modified())
    ok = FIGURES["R2 nothing inserted after a focus change"].check(
        outcome.status == "kept" and changed == (False, False)
    )
    assert ok, (outcome, changed)


def test_clipboard_mode_completes_the_copied_text(
    wl: WaylandSession,
    clipboard_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    """Clipboard mode as on X11: the user copies text holding the cursor marker; the
    completed text replaces it on the clipboard (read with pyperclip, set by wl-copy)."""
    editor, _, _ = prepare(wl, editors, CASES["line_end"])
    wl.set_clipboard("Grüße, <|cursor|>!\nbye")
    answer(llama, Reply(text="Köln"))

    outcome = trigger(clipboard_daemon)

    assert (outcome.status, outcome.capture) == ("clipboard", "clipboard"), outcome
    assert wl.get_clipboard() == "Grüße, Köln!\nbye"
    assert not editor.modified()


async def test_data_control_clipboard_snapshot_restore_and_takeover(
    wl: WaylandSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clipboard port the paste route uses, against sway's real data-control: an image
    comes back byte for byte, text through pyperclip, and another program's copy made while
    we own the clipboard is seen (so a paste never restores over it)."""
    for key in ("WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"):
        monkeypatch.setenv(key, wl.env[key])
    monkeypatch.delenv("DISPLAY", raising=False)
    image = bytes(range(256)) * 40
    wl.run("wl-copy", "--type", "image/png", data=image)
    async with WlClipboard() as clipboard:
        saved = await clipboard.snapshot("clipboard")
        assert saved.items["image/png"][2] == image

        offer = await clipboard.offer("clipboard", ClipSnapshot.from_text("middle ✓"))
        assert await clipboard.read_text("clipboard", 2.0) == "middle ✓"
        assert not offer.lost.is_set()
        await clipboard.restore("clipboard", saved)
        pasted = await asyncio.to_thread(
            subprocess.run,
            ["wl-paste", "--type", "image/png"],
            env=wl.env,
            capture_output=True,
            check=True,
        )
        assert pasted.stdout == image

        taken = await clipboard.offer("clipboard", ClipSnapshot.from_text("ours"))
        await asyncio.to_thread(wl.set_clipboard, "the user copied this")
        for _ in range(200):
            if taken.lost.is_set():
                break
            await asyncio.sleep(0.01)
        assert taken.lost.is_set()


def test_trigger_completes_in_a_native_wayland_qt_editor(
    wl: WaylandSession, wl_daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """Qt (QPlainTextEdit, our target app) on Qt's own Wayland platform plugin: AT-SPI
    insertion there too; the app reports its text and caret itself."""
    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, "anyfill-wl-qt")  # type: ignore[arg-type]
    try:
        wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")
        target.set("Hello world ✓", 6)
        wl.set_clipboard(USER_CLIP)
        answer(llama, Reply(text="big "))

        outcome = trigger(wl_daemon)

        # Qt builds its accessibility tree on the first query, which can outlast the
        # capture's AT-SPI budget on a busy machine: the keyboard capture (wtype's chords
        # do reach Qt) then reads the text instead. Insertion is AT-SPI either way.
        assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
        assert outcome.capture in ("accessibility", "keyboard")
        state = target.state()
        assert (state["text"], state["caret"]) == ("Hello big world ✓", 10)
        assert wl.get_clipboard() == USER_CLIP
    finally:
        target.close()


@pytest.mark.parametrize("rep", range(REPEAT))
def test_paste_route_in_a_native_wayland_qt_editor(
    rep: int,
    wl: WaylandSession,
    paste_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
) -> None:
    """The routes where AT-SPI is not used. Capture: Shift+Home/End and Ctrl+C on the
    virtual keyboard (wtype), read through data-control. Insertion: the completion goes on
    the clipboard (wl-copy), Ctrl+V goes out on the virtual keyboard, and the user's
    clipboard is put back. Typing is asked for, but non-ASCII text is pasted. Qt takes
    wtype's chords (GTK here does not; see docs/wayland.md)."""
    known = {n.get("id") for n in wl.windows()}
    target = QtTarget(wl, "anyfill-wl-qt-paste")  # type: ignore[arg-type]
    try:
        wait_until(lambda: wl.focused_window().get("id") not in known | {None}, 20, "the Qt window")
        target.set("Grüße aus Köln", 6)
        wl.set_clipboard(USER_CLIP)
        wl.set_clipboard("the user's primary selection", primary=True)
        answer(llama, Reply(text="schöne ✓ "))
        before = len(infill(llama[1]))

        outcome = trigger(paste_daemon)

        assert (outcome.status, outcome.method, outcome.capture) == (
            "inserted",
            "paste",
            "keyboard",
        ), outcome
        sent = infill(llama[1])[before].json()
        assert (sent["input_prefix"], sent["input_suffix"]) == ("Grüße ", "aus Köln")
        state = target.state()
        assert (state["text"], state["caret"]) == ("Grüße schöne ✓ aus Köln", 15)
        restored = FIGURES["R1 user clipboard restored"].check(wl.get_clipboard() == USER_CLIP)
        assert restored, wl.get_clipboard()
        primary = wl.get_clipboard(primary=True)
        restored = FIGURES["R1 user PRIMARY restored"].check(
            primary == "the user's primary selection"
        )
        assert restored, primary
    finally:
        target.close()


@pytest.mark.parametrize("rep", range(REPEAT))
@pytest.mark.parametrize("name", list(CASES))
def test_keyboard_capture_and_paste_in_native_wayland_gtk_mousepad(
    name: str,
    rep: int,
    wl: WaylandSession,
    gtk_paste_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    editors: list[Editor],
) -> None:
    """GTK takes our virtual keyboard's chords: the capture selects with Shift+Home/End
    (Ctrl+Shift+Home/End) and copies with Ctrl+C, the completion goes in with Ctrl+V, and
    the user's clipboard and primary selection are put back. With wtype's own keymap GTK 3
    ignored every chord (docs/wayland.md)."""
    case = CASES[name]
    editor, text, caret = open_unreachable_mousepad(wl, editors, case)
    answer(llama, Reply(text=case.reply))
    before = len(infill(llama[1]))

    outcome = trigger(gtk_paste_daemon)

    assert (outcome.status, outcome.method, outcome.capture) == (
        "inserted",
        "paste",
        "keyboard",
    ), outcome
    sent = infill(llama[1])[before].json()
    assert (sent["input_prefix"], sent["input_suffix"]) == (text[:caret], text[caret:])
    restored = FIGURES["R1 user clipboard restored"].check(wl.get_clipboard() == USER_CLIP)
    assert restored, wl.get_clipboard()
    primary = wl.get_clipboard(primary=True)
    restored = FIGURES["R1 user PRIMARY restored"].check(primary == "the user's primary selection")
    assert restored, primary
    wl.type_text("|")  # lands at the caret: the caret is after the inserted text
    saved = wait_until(lambda: _with_mark(editor.save()), 5, "the typed mark in the document")
    assert saved == text[:caret] + case.reply + "|" + text[caret:]


@pytest.mark.parametrize("rep", range(REPEAT))
@pytest.mark.parametrize("route", ["own", "wtype"])
async def test_key_routes_drive_native_wayland_gtk_mousepad(
    route: str, rep: int, wl: WaylandSession, editors: list[Editor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both key routes, straight into GTK: a named key with Shift, cut, non-ASCII and
    multi-line text typed, Ctrl+Home. wtype is the fallback where our own virtual keyboard
    cannot be had."""
    for key in ("WAYLAND_DISPLAY", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(key, wl.env[key])
    editor = await asyncio.to_thread(open_mousepad, wl, "alpha beta\ngamma\n", 1, 6)
    editors.append(editor)
    async with AsyncExitStack() as stack:
        keys: Keys = WtypeKeys()
        if route == "own":
            keys = await stack.enter_async_context(VirtualKeyboard(wl.env))
        await keys.press("<shift>+<end>")
        await keys.press("<ctrl>+x")
        assert await keys.type_text("Grüße ✓ {A|b}? ~_~\n日本 ")
        await keys.press("<ctrl>+<home>")
        assert await keys.type_text("^")
    saved = await asyncio.to_thread(wait_until, lambda: _with_caret(editor.save()), 5, "the ^")
    assert saved == "^alpha Grüße ✓ {A|b}? ~_~\n日本 \ngamma\n"
    assert await asyncio.to_thread(wl.get_clipboard) == "beta"


def _with_caret(saved: str) -> str:
    return saved if "^" in saved else ""

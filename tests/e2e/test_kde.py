"""anyfill on a real KDE Plasma compositor: KWin 5.27 headless, xdg-desktop-portal-kde.

The daemon picks its routes from the session on its own: the focus guard asks KWin (our
KWin script), hotkeys go through KDE's GlobalShortcuts portal, paste keys through KDE's
RemoteDesktop portal, the clipboard through data-control (wl-clipboard). The target is our
Qt editor on Qt's Wayland plugin; it reports its text and caret itself. KWin's windows and
focus are read and moved through KWin's scripting interface, not through anyfill.

One KWin, one bus, one daemon per module: start-up is paid once.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from anyfill.daemon.wayland.kwin import PLUGIN, KWinFocus, window_target
from tests.e2e.conftest import FIGURES, REPEAT, Tally
from tests.e2e.harness import Daemon, Outcome, QtTarget, daemon_config, wait_until
from tests.e2e.kde import UNUSABLE, KdeSession, press_keys
from tests.e2e.wayland import Editor, wait_accessible
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]

USER_CLIP = "the user's clipboard ✓ (kde)"
GUARDED = FIGURES.setdefault("R2 KDE: nothing inserted after a focus change", Tally())
CLIP_KEPT = FIGURES.setdefault("R1 KDE: user clipboard intact after a focus change", Tally())


@pytest.fixture(scope="module")
def kde() -> Iterator[KdeSession]:
    with KdeSession.start() as session:
        yield session


@pytest.fixture(scope="module")
def kde_daemon(kde: KdeSession, llama: tuple[LlamaCpp, LoopbackServer]) -> Iterator[Daemon]:
    process = Daemon(kde, daemon_config(llama[1].url), "anyfill-kde", runtime_dir=kde.run_dir)  # type: ignore[arg-type]
    yield process
    process.stop()


@pytest.fixture
def targets(kde: KdeSession) -> Iterator[list[QtTarget]]:
    opened: list[QtTarget] = []
    yield opened
    for target in opened:
        target.close()


def open_target(kde: KdeSession, targets: list[QtTarget], name: str) -> tuple[QtTarget, str]:
    """A new Qt editor window, active; its KWin id."""
    known = {str(w["id"]) for w in kde.kwin_windows()}
    target = QtTarget(kde, name)  # type: ignore[arg-type]
    targets.append(target)
    window = kde.wait_new_active(known, f"the Qt window {name}")
    wait_accessible(kde, int(window["pid"]))
    return target, str(window["id"])


def anyfill_id(kwin_id: str) -> int:
    """The window id anyfill derives from KWin's internal id."""
    target = window_target(kwin_id, "", "", "0")
    assert target is not None
    return target.window_id


def own_connection(kde: KdeSession) -> str:
    """This process's one connection to the session bus (the KWin focus source's)."""
    names = kde.dbus(
        "/org/freedesktop/DBus", "org.freedesktop.DBus.ListNames", dest="org.freedesktop.DBus"
    )
    for name in re.findall(r"'(:[0-9.]+)'", names):
        # check=False: a gdbus of ours that listed the names is gone already.
        pid = kde.run(
            "gdbus", "call", "--session", "--dest", "org.freedesktop.DBus",
            "--object-path", "/org/freedesktop/DBus",
            "--method", "org.freedesktop.DBus.GetConnectionUnixProcessID", name,
            check=False,
        )  # fmt: skip
        if pid.startswith("(uint32") and int(pid.strip("()\n,").split()[-1]) == os.getpid():
            return name
    raise AssertionError("this process has no connection to the session bus")


def answer(llama: tuple[LlamaCpp, LoopbackServer], reply: Reply) -> None:
    llama[0].queue.clear()
    llama[0].push(reply)


def infill_count(server: LoopbackServer) -> int:
    return sum(1 for request in server.requests if request.path == "/infill")


def trigger(daemon: Daemon) -> Outcome:
    count = len(daemon.outcomes())
    code, out = daemon.cli("trigger", "complete")
    assert code == 0, out
    try:
        return daemon.wait_outcome(count + 1)
    except TimeoutError as exc:
        raise AssertionError(daemon.log()[-3000:]) from exc


def test_the_daemon_chose_the_kde_routes(kde: KdeSession, kde_daemon: Daemon) -> None:
    kde.wait_log(kde_daemon.log_path.name, "global shortcuts bound")
    log = kde_daemon.log()
    assert "wayland focus guard: KWin scripting (D-Bus)" in log
    assert "wayland hotkeys: GlobalShortcuts portal" in log
    assert "wayland keys: RemoteDesktop portal" in log
    assert "wayland clipboard: data-control (wlr-data-control-unstable-v1 v2, native" in log
    assert "wayland insertion: AT-SPI EditableText, else paste" in log
    # KDE 5.27's portal took our keys (from CreateSession) into kglobalaccel, under a
    # group named after our fixed session token: found again at the next start.
    bound = log.split("global shortcuts bound: ", 1)[1].splitlines()[0]
    assert sorted(bound.split(", ")) == [
        "cancel=Ctrl+Alt+Backspace",
        "complete=Ctrl+Alt+Space",
        "preview=Ctrl+Alt+Return",
    ]
    assert "['anyfill', 'anyfill', '', '']" in kde.shortcut_components()
    names = kde.dbus(
        "/component/anyfill", "org.kde.kglobalaccel.Component.shortcutNames",
        dest="org.kde.kglobalaccel",
    )  # fmt: skip
    assert sorted(names.strip("()[],\n").replace("'", "").split(", ")) == [
        "cancel",
        "complete",
        "preview",
    ]


def test_trigger_completes_in_a_native_wayland_qt_editor_on_kwin(
    kde: KdeSession,
    kde_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    targets: list[QtTarget],
) -> None:
    target, _ = open_target(kde, targets, "anyfill-kde-qt")
    target.set("Hello world ✓", 6)
    kde.set_clipboard(USER_CLIP)
    answer(llama, Reply(text="big "))

    outcome = trigger(kde_daemon)

    assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
    state = target.state()
    assert (state["text"], state["caret"]) == ("Hello big world ✓", 10)
    assert kde.get_clipboard() == USER_CLIP


def test_kde_global_shortcut_runs_the_completion(
    kde: KdeSession,
    kde_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    targets: list[QtTarget],
) -> None:
    """The press as KDE delivers it: kglobalaccel (in KWin) fires our shortcut, KDE's
    portal sends ``Activated``, the daemon completes. No ``anyfill trigger``."""
    kde.wait_log(kde_daemon.log_path.name, "global shortcuts bound")
    target, _ = open_target(kde, targets, "anyfill-kde-shortcut")
    target.set("alpha omega", 6)
    kde.set_clipboard(USER_CLIP)
    answer(llama, Reply(text="beta "))
    count = len(kde_daemon.outcomes())

    kde.invoke_shortcut("anyfill", "complete")

    outcome = kde_daemon.wait_outcome(count + 1)
    assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
    state = target.state()
    assert (state["text"], state["caret"]) == ("alpha beta omega", 11)
    assert kde.get_clipboard() == USER_CLIP


def test_ctrl_alt_space_pressed_on_kwin_completes(
    kde: KdeSession,
    kde_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    targets: list[QtTarget],
) -> None:
    """The whole press: Ctrl+Alt+Space goes into KWin's input (the test's keyboard is
    KDE's RemoteDesktop portal), KWin gives it to kglobalaccel as the shortcut KDE's
    portal registered for us, the daemon completes. The key never reaches the editor."""
    kde.wait_log(kde_daemon.log_path.name, "global shortcuts bound")
    target, _ = open_target(kde, targets, "anyfill-kde-press")
    target.set("red blue", 4)
    kde.set_clipboard(USER_CLIP)
    answer(llama, Reply(text="green "))
    count = len(kde_daemon.outcomes())

    press_keys(kde.env["DBUS_SESSION_BUS_ADDRESS"], "ctrl", "alt", "space")

    outcome = kde_daemon.wait_outcome(count + 1)
    assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
    state = target.state()
    assert (state["text"], state["caret"]) == ("red green blue", 10)
    assert "Key_Space" not in " ".join(state["keys"])
    assert kde.get_clipboard() == USER_CLIP


def test_shortcuts_come_back_after_kdes_portal_backend_restarts(
    kde: KdeSession,
    kde_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    targets: list[QtTarget],
) -> None:
    """xdg-desktop-portal 1.16 sends no Session.Closed when KDE's backend dies: the daemon
    sees the backend's bus name go, binds again (the bus activates a new backend), and the
    shortcut works again."""
    kde.wait_log(kde_daemon.log_path.name, "global shortcuts bound")
    out = kde.dbus(
        "/org/freedesktop/DBus", "org.freedesktop.DBus.GetConnectionUnixProcessID",
        "org.freedesktop.impl.portal.desktop.kde", dest="org.freedesktop.DBus",
    )  # fmt: skip
    backend = int(out.strip("()\n,").split()[-1])
    os.kill(backend, signal.SIGTERM)
    kde.wait_log(kde_daemon.log_path.name, "a new one is bound", within=15)
    target, _ = open_target(kde, targets, "anyfill-kde-rebound")
    target.set("one three", 4)
    answer(llama, Reply(text="two "))
    count = len(kde_daemon.outcomes())

    kde.invoke_shortcut("anyfill", "complete")

    outcome = kde_daemon.wait_outcome(count + 1)
    assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
    assert target.state()["text"] == "one two three"


def test_trigger_completes_in_native_wayland_mousepad_on_kwin(
    kde: KdeSession, kde_daemon: Daemon, llama: tuple[LlamaCpp, LoopbackServer]
) -> None:
    """GTK on KWin: native Wayland Mousepad, AT-SPI insertion; the document is read back
    from disk after Mousepad saves it (its exported ``file.save`` action)."""
    text = "Grüße aus Köln ✓\nzweite Zeile\n"
    path = kde.workdir / "kde-doc.txt"
    path.write_text(text, encoding="utf-8")
    known = {str(w["id"]) for w in kde.kwin_windows()}
    process = kde.spawn(
        ["mousepad", "--opening-mode=window", "--line=1", "--column=6", str(path)],
        "mousepad.log",
    )
    editor = Editor(path, process, kde, 0, 1)
    try:
        window = kde.wait_new_active(known, "the Mousepad window")
        assert window["app"] == "mousepad"
        kde.set_clipboard(USER_CLIP)
        answer(llama, Reply(text="schöne "))

        outcome = trigger(kde_daemon)

        assert (outcome.status, outcome.method) == ("inserted", "accessibility"), outcome
        assert editor.save() == "Grüße schöne aus Köln ✓\nzweite Zeile\n"
        assert kde.get_clipboard() == USER_CLIP
    finally:
        editor.close()


@pytest.mark.parametrize("rep", range(REPEAT))
def test_focus_moved_on_kwin_inserts_nothing(
    rep: int,
    kde: KdeSession,
    kde_daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    targets: list[QtTarget],
) -> None:
    first, first_id = open_target(kde, targets, "anyfill-kde-first")
    second, second_id = open_target(kde, targets, "anyfill-kde-second")
    first.set("first window", 5)
    second.set("second window", 6)
    kde.activate(first_id)
    kde.set_clipboard(USER_CLIP)
    answer(llama, Reply(text="never ", delay_s=0.6))
    before = infill_count(llama[1])
    count = len(kde_daemon.outcomes())

    code, out = kde_daemon.cli("trigger", "complete")
    assert code == 0, out
    wait_until(lambda: infill_count(llama[1]) > before, 5, "the request to reach the backend")
    kde.activate(second_id)
    outcome = kde_daemon.wait_outcome(count + 1)

    texts = (first.state()["text"], second.state()["text"])
    kept = GUARDED.check(outcome.status == "kept" and texts == ("first window", "second window"))
    assert kept, (outcome, texts)
    assert "focus moved" in outcome.reason
    assert CLIP_KEPT.check(kde.get_clipboard() == USER_CLIP)


@pytest.mark.skipif(
    not os.environ.get("ANYFILL_E2E_KDE_PASTE"),
    reason="opt-in: on KWin 5.27 the user's clipboard was empty after the wl-clipboard "
    "restore in 2 of 72 runs (native data-control since: 15 of 15 ok, too few to be sure; "
    "see docs/wayland.md Limits): set ANYFILL_E2E_KDE_PASTE=1",
)
def test_paste_route_through_kdes_remote_desktop_portal(
    kde: KdeSession,
    llama: tuple[LlamaCpp, LoopbackServer],
    targets: list[QtTarget],
) -> None:
    """Where AT-SPI insertion is not used: the completion goes on the clipboard
    (data-control), Ctrl+V goes out through KDE's RemoteDesktop portal (5.27 asks no
    consent of an unsandboxed client; it shows a notification), and the user's clipboard
    is put back. Typing is asked for, but non-ASCII text is pasted."""
    rule = '[[insert.apps]]\nmatch = "^python"\nmode = "type"\n'
    daemon = Daemon(kde, daemon_config(llama[1].url, rule), "anyfill-kde-paste")  # type: ignore[arg-type]
    try:
        target, _ = open_target(kde, targets, "anyfill-kde-paste")
        target.set("Grüße aus Köln", 6)
        kde.set_clipboard(USER_CLIP)
        answer(llama, Reply(text="schöne ✓ "))

        outcome = trigger(daemon)

        assert (outcome.status, outcome.method) == ("inserted", "paste"), outcome
        state = target.state()
        assert (state["text"], state["caret"]) == ("Grüße schöne ✓ aus Köln", 15)
        assert "ctrl+Key_V" in state["keys"]
        assert "remote desktop session started (keyboard)" in daemon.log()
        assert kde.get_clipboard() == USER_CLIP
    finally:
        daemon.stop()


def test_doctor_names_the_kde_routes(kde: KdeSession, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[backends]]\nname = "x"\ntype = "llamacpp"\nurl = "http://127.0.0.1:9"\n'
        '[routing]\ndefault = ["x"]\n'
    )
    out = kde.run(
        sys.executable, "-m", "anyfill.daemon.cli", "--config", str(config), "doctor", check=False
    )
    lines = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 1}
    assert "Wayland session (kde)" in lines["desktop"], out
    assert lines["hotkeys"].startswith("ok")
    assert "GlobalShortcuts portal" in lines["hotkeys"]
    assert "RemoteDesktop portal" in lines["keys"]
    assert "data-control (wlr-data-control-unstable-v1 v2, native)" in lines["clipboard"]
    assert "KWin scripting" in lines["focus"]
    popup = next(line for line in out.splitlines() if "preview popup" in line)
    assert "at the caret (the window's place from KWin" in popup, out


def test_kwin_focus_source_follows_kwins_active_window(
    kde: KdeSession, targets: list[QtTarget]
) -> None:
    """KWinFocus (our KWin script) against what a script of the test's own prints: the
    same window after each focus change, reloaded when KWin lost the script, unloaded on
    close."""
    _, first_id = open_target(kde, targets, "anyfill-kde-src-1")
    _, second_id = open_target(kde, targets, "anyfill-kde-src-2")
    source = KWinFocus(kde.env["DBUS_SESSION_BUS_ADDRESS"])
    try:
        for window_id in (first_id, second_id, first_id):
            kde.activate(window_id)
            active = kde.active_window()
            found = source.focused()
            assert found is not None
            assert found.window_id == anyfill_id(window_id)
            assert (found.app, found.pid, found.title) == (
                active["app"],
                active["pid"],
                active["caption"],
            )
        # Another program on the bus cannot move the guard's idea of the focus.
        spoofed = kde.run(
            "gdbus", "call", "--session", "--dest", own_connection(kde),
            "--object-path", "/org/anyfill/KWinFocus",
            "--method", "org.anyfill.KWinFocus.Activated",
            "{00000000-0000-0000-0000-000000000001}", "evil", "spoof", str(os.getpid()),
            check=False,
        )  # fmt: skip
        assert "AccessDenied" in spoofed, spoofed
        found = source.focused()
        assert found is not None
        assert found.window_id == anyfill_id(first_id)
        # KWin restarted or another tool unloaded our script: the next question loads it.
        unloaded = kde.dbus("/Scripting", "org.kde.kwin.Scripting.unloadScript", PLUGIN)
        assert "true" in unloaded
        kde.activate(second_id)
        found = source.focused()
        assert found is not None
        assert found.window_id == anyfill_id(second_id)
        assert source.unavailable == ""
    finally:
        source.close()
    loaded = kde.dbus("/Scripting", "org.kde.kwin.Scripting.isScriptLoaded", PLUGIN)
    assert "false" in loaded
